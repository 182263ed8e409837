"""`probe` against the simulated engine set to reject, ignore or honour each parameter: every
verdict is reached, a rejection carries the server's error, and a spec's own parameters are
the ones probed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.runspec.spec import spec_from_dict
from loadgen.runspec.target_spec import TargetSpec
from loadgen.targets.probe import (
    HONOURED,
    IGNORED,
    REJECTED,
    probe_sync,
    spec_checks,
)
from tests.support.sim import start_sim
from ui.cli import cli

FAST = ["--preset", "fixed", "--ttft-ms", "1", "--itl-ms", "0.2"]
CHECKED = ["stream", "include_usage", "max_tokens", "max_completion_tokens", "ignore_eos", "n",
           "logprobs", "seed", "stop", "tools", "response_format"]  # fmt: skip


ALL = [*CHECKED, "logit_bias", "tools_with_schema", "reasoning_effort"]
CAPS = ["max_tokens", "max_completion_tokens"]


def _probe(modes: dict[str, str], checks: list[str] | None = None) -> dict[str, tuple[str, str]]:
    args = [*FAST]
    for name, mode in modes.items():
        args += ["--param", f"{name}={mode}"]
    with start_sim(args) as sim:
        spec = TargetSpec(api="openai-chat", base_url=sim.base_url, model="m")
        result = probe_sync(spec, checks)
    return {v.param: (v.verdict, v.detail) for v in result.verdicts}


def test_every_parameter_honoured() -> None:
    got = _probe(dict.fromkeys(ALL, "honour"))
    for name in CHECKED:
        assert got[name][0] == HONOURED, (name, got[name])
    assert got["tools_with_schema"][0] == HONOURED
    assert got["logit_bias"][0] == "accepted"


def test_every_parameter_ignored_is_detected_from_the_response() -> None:
    # a model that stops early hides an ignored cap: the caps are judged with ignore_eos kept
    got = _probe({**dict.fromkeys(ALL, "ignore"), "ignore_eos": "honour"})
    for name in CHECKED:
        if name != "ignore_eos":
            assert got[name][0] == IGNORED, (name, got[name])
    assert "longer than max_tokens=4" in got["max_tokens"][1]
    assert "1 returned" in got["n"][1]
    assert "breaks the JSON schema" in got["response_format"][1]
    assert "no logprobs" in got["logprobs"][1]
    got = _probe({"ignore_eos": "ignore"}, ["ignore_eos"])
    assert got["ignore_eos"][0] == IGNORED and "stopped at 2 of 24" in got["ignore_eos"][1]


def test_every_parameter_rejected_with_the_servers_error() -> None:
    got = _probe(dict.fromkeys([n for n in ALL if n not in CAPS], "reject"))
    for name in ALL:
        if name not in CAPS:
            assert got[name][0] == REJECTED, (name, got[name])
    assert "unsupported parameter: logprobs" in got["logprobs"][1]
    got = _probe(dict.fromkeys(CAPS, "reject"), CAPS)
    assert got == {n: (REJECTED, f"unsupported parameter: {n}") for n in CAPS}


def test_spec_checks_cover_what_the_spec_sends() -> None:
    spec = spec_from_dict({
        "name": "s", "load": {"concurrency": [1], "duration_s": 5},
        "target": {"preset": "groq", "model": "openai/gpt-oss-20b", "ignore_eos": True,
                   "extra_body": {"seed": 3, "tools": [], "response_format": {}, "foo": 1}},
    })  # fmt: skip
    names, extra = spec_checks(spec)
    assert names == ["stream", "include_usage", "max_completion_tokens", "ignore_eos", "seed",
                     "tools", "response_format", "key:foo", "tools_with_schema"]  # fmt: skip
    assert extra["foo"] == 1


def test_probe_command_with_a_spec_and_json(tmp_path: Path) -> None:
    with start_sim([*FAST, "--param", "seed=reject"]) as sim:
        spec = tmp_path / "s.toml"
        spec.write_text(
            f'name = "s"\n[target]\napi = "openai-chat"\nbase_url = "{sim.base_url}"\n'
            'model = "m"\nextra_body = { seed = 5 }\n[load]\nconcurrency = [1]\nduration_s = 5\n'
        )
        r = CliRunner().invoke(cli, ["probe", str(spec), "--json"])
    assert r.exit_code == 1, r.output  # something was rejected
    verdicts = {v["param"]: v["verdict"] for v in json.loads(r.output)["verdicts"]}
    assert verdicts == {"stream": HONOURED, "include_usage": HONOURED, "max_tokens": HONOURED,
                        "seed": REJECTED}  # fmt: skip


@pytest.mark.parametrize("bad", ["nope", "ftp://x"])
def test_probe_command_bad_target_is_bad_input(bad: str) -> None:
    r = CliRunner().invoke(cli, ["probe", bad, "--model", "m"])
    assert r.exit_code == 2 and "TARGET" in r.output


NATIVE = ["openai-responses", "ollama-chat", "ollama-generate", "tgi-generate",
          "llamacpp-completion", "triton-generate"]  # fmt: skip


def test_native_apis_probe_stream_and_cap_through_the_target() -> None:
    with start_sim(FAST) as sim:
        root = sim.base_url.removesuffix("/v1")
        for api in NATIVE:
            base = sim.base_url if api == "openai-responses" else root
            spec = TargetSpec(api=api, base_url=base, model="m")  # type: ignore[arg-type]
            got = {v.param: v for v in probe_sync(spec, ["stream", "max_tokens", "n"]).verdicts}
            assert got["stream"].verdict == HONOURED, (api, got["stream"])
            assert got["max_tokens"].verdict == HONOURED, (api, got["max_tokens"])
            assert got["n"].verdict == "inconclusive" and api in got["n"].detail


def test_probe_honours_the_target_policy() -> None:
    """The probe sends requests: a metadata address is refused before any is sent."""
    r = CliRunner().invoke(cli, ["probe", "http://169.254.169.254/v1"])
    assert r.exit_code == 2 and "metadata address" in r.output


def test_probe_sends_the_runs_headers_env_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe sends what the run would send: `headers_env` headers filled in from this process's
    environment (an unset variable is a SpecError naming it, before anything is sent)."""
    import http.server
    import threading

    from loadgen.errors import SpecError

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("X-Auth-Token"))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'{"error": {"message": "unauthorized"}}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        spec = TargetSpec(
            api="openai-chat",
            base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
            model="m",
            headers_env={"X-Auth-Token": "PEAKLOAD_TEST_PROBE_TOKEN"},
        )
        monkeypatch.delenv("PEAKLOAD_TEST_PROBE_TOKEN", raising=False)
        with pytest.raises(SpecError, match="PEAKLOAD_TEST_PROBE_TOKEN"):
            probe_sync(spec, ["stream"])
        assert seen == []
        monkeypatch.setenv("PEAKLOAD_TEST_PROBE_TOKEN", "tok-1234")
        probe_sync(spec, ["stream"])
        assert seen and set(seen) == {"tok-1234"}
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
