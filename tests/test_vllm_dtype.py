"""The test vLLM's dtype follows the CPU (tests/support/vllm.py): bfloat16 only where the CPU
computes in it natively, float32 elsewhere (bf16 emulated on AVX2 made prefill 4-5x slower)."""

from __future__ import annotations

from tests.support.vllm import cpu_flags, serving_dtype

EPYC_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
XEON_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_flags_are_read_from_cpuinfo() -> None:
    assert cpu_flags(EPYC_AVX2) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags("processor\t: 0\n") == frozenset()


def test_bfloat16_only_where_the_cpu_has_it() -> None:
    assert serving_dtype(cpu_flags(EPYC_AVX2)) == "float32"
    assert serving_dtype(cpu_flags(XEON_AMX)) == "bfloat16"
    assert serving_dtype(frozenset({"avx512_bf16"})) == "bfloat16"
    assert serving_dtype(frozenset()) == "float32"
