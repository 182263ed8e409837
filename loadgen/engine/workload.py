"""Workloads: what each request asks for. Synthetic prompts with seeded length distributions and
an optional shared prefix, JSONL datasets, and multi-turn sessions whose context grows.

Synthetic prompts are made of words from a fixed vocabulary; `tokens_per_word` (1.0 unless
calibrated from the server's reported usage, see `calibrate_tokens_per_word`) converts a target
token count into a word count. Nothing is downloaded: no tokenizer is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.engine.adapters import AdapterPicker, name_adapter
from loadgen.engine.audioclips import AudioClip, load_clips
from loadgen.engine.blocks import PrefixBlocks
from loadgen.errors import SpecError
from loadgen.runspec.jsonl import jsonl_rows
from loadgen.runspec.lengths import (
    FixedLength,
    LengthDist,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from loadgen.runspec.spec import RunSpec
from loadgen.runspec.target_spec import SPEECH_API, TRANSCRIPTION_API
from loadgen.targets.apis.base import is_chat

# Short, common, single-token words in most BPE vocabularies (each followed by a space).
_VOCAB = (  # noqa: SIM905 - a word list reads best as text
    "the of and to in is was he for it with as his on be at by had are but from or have an "
    "they which one you were her all she there would their we him been has when who will "
    "more no if out so said what up its about into than them can only other new some could "
    "time these two may then do first any my now such like our over man me even most made "
    "after also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three"
).split()
_VOCAB_ARRAY = np.array(_VOCAB)


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` integer lengths (tokens) drawn from `dist`, clipped to its bounds and to >= 1."""
    if isinstance(dist, FixedLength):
        return np.full(n, dist.value, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.min, dist.max + 1, size=n, dtype=np.int64)
    if isinstance(dist, NormalLength):
        raw = rng.normal(dist.mean, dist.std, size=n)
        lo, hi = dist.min, dist.max
    elif isinstance(dist, LognormalLength):
        raw = rng.lognormal(math.log(dist.median), dist.sigma, size=n)
        lo, hi = dist.min, dist.max
    else:  # pragma: no cover - the discriminated union is exhaustive
        raise TypeError(dist)
    out = np.rint(raw).astype(np.int64)
    return np.clip(out, lo, hi if hi is not None else np.iinfo(np.int64).max)


@dataclass(slots=True)
class Prompt:
    """One request's input: chat messages (or a plain prompt for completions), the LoRA adapter
    it asks for (None: the target's model), and the planned tokens of the run's shared prefix
    it starts with (None: the workload has none; 0: this request goes without)."""

    messages: list[dict[str, str]]
    prompt_tokens: int  # planned length in tokens (synthetic) or None-equivalent -1 (dataset)
    max_tokens: int
    audio: AudioClip | None = None  # speech in: the upload (then `messages` is empty)
    adapter: str | None = None
    shared_prefix_tokens: int | None = None


def _words(rng: np.random.Generator, n: int) -> str:
    if n <= 0:
        return ""
    return " ".join(_VOCAB_ARRAY[rng.integers(0, len(_VOCAB_ARRAY), size=n)].tolist())


class Workload:
    """Makes prompts for one shard, deterministically from (seed, request index).

    The same (seed, index) always yields the same prompt, so a replayed shard asks the same
    questions. The shared prefix is identical across all shards of a run (seeded by the spec's
    workload seed only), so prefix caching behaves as it would with one client.
    """

    def __init__(self, spec: RunSpec, shard_seed: int, tokens_per_word: float = 1.0) -> None:
        if tokens_per_word <= 0:
            raise SpecError("tokens_per_word must be positive", where="calibration")
        w = spec.workload
        self._spec = spec
        self._seed = shard_seed
        self._tpw = tokens_per_word
        self._dataset = load_dataset(w.dataset) if w.dataset else None
        prefix_rng = np.random.default_rng([w.seed, 0x5EED])
        self._prefix_cache: dict[int, str] = {}
        self._prefix_rng_state = prefix_rng.bit_generator.state
        self._system = w.system_prompt
        self._clips: list[AudioClip] | None = None
        if spec.target.api == TRANSCRIPTION_API:  # the same clips on every shard of a run
            self._clips = load_clips(w.audio, w.seed, tuple(_VOCAB))
        self._adapters = AdapterPicker(w, shard_seed)
        self._blocks = PrefixBlocks(
            w.seed, spec.load.trace_block_tokens, lambda rng, t: _words(rng, self._words_for(t))
        )

    def _shared_prefix(self, tokens: int) -> str:
        text = self._prefix_cache.get(tokens)
        if text is None:
            rng = np.random.default_rng([self._spec.workload.seed, 0x5EED, tokens])
            text = _words(rng, self._words_for(tokens))
            self._prefix_cache[tokens] = text
        return text

    def _words_for(self, tokens: int) -> int:
        return max(0, round(tokens / self._tpw))

    def prompt(
        self,
        index: int,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        prefix_blocks: tuple[int, ...] = (),
    ) -> Prompt:
        """The prompt for request `index` of this shard; lengths may be forced (trace replay),
        and `prefix_blocks` (a Mooncake trace's hash ids) make its text from shared blocks."""
        rng = np.random.default_rng([self._seed, index])
        w = self._spec.workload
        if self._clips is not None:
            clip = self._clips[index % len(self._clips)]
            return Prompt([], -1, clip.words or 0, audio=clip)
        picked = self._adapters.pick(index)
        adapter = picked.name if picked is not None else None
        if self._dataset is not None:
            row = self._dataset[index % len(self._dataset)]
            out = (
                output_tokens
                or row.get("output_tokens")
                or int(sample_lengths(w.output_tokens, 1, rng)[0])
            )
            return Prompt(
                messages=self._with_system([{"role": "user", "content": row["prompt"]}]),
                prompt_tokens=-1,
                max_tokens=int(out),
                adapter=adapter,
            )
        p = (
            prompt_tokens
            if prompt_tokens is not None
            else int(sample_lengths(w.prompt_tokens, 1, rng)[0])
        )
        out = (
            output_tokens
            if output_tokens is not None
            else int(sample_lengths(w.output_tokens, 1, rng)[0])
        )
        shared = int(p * w.shared_prefix_fraction)
        if w.compare_prefix and _without_prefix(self._seed, index):
            shared = 0  # the other arm: a prompt of the same length, all of it unique
        parts = []
        if prefix_blocks:  # the trace's blocks replace the spec's shared prefix
            block = self._spec.load.trace_block_tokens
            shared = min(p, len(prefix_blocks) * block)
            parts.append(self._blocks.text(prefix_blocks, shared))
        elif shared > 0:
            parts.append(self._shared_prefix(shared))
        # A unique marker first in the unique part defeats prefix caching beyond the shared part.
        unique_words = self._words_for(p - shared)
        if unique_words > 0:
            parts.append(f"{index}")
            parts.append(_words(rng, unique_words - 1))
        text = " ".join(x for x in parts if x)
        return Prompt(
            messages=self._with_system([{"role": "user", "content": text}]),
            prompt_tokens=p,
            max_tokens=out,
            adapter=adapter,
            shared_prefix_tokens=shared if w.shared_prefix_fraction > 0 or prefix_blocks else None,
        )

    def user_turn(self, session_seed: int, turn: int) -> str:
        """The user's words for `turn` of a multi-turn session."""
        sess = self._spec.workload.sessions
        assert sess is not None
        rng = np.random.default_rng([self._seed, session_seed, turn, 0x7E])
        n = int(sample_lengths(sess.user_tokens_per_turn, 1, rng)[0])
        return f"{session_seed}.{turn} " + _words(rng, self._words_for(n) - 1)

    def _with_system(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        if self._system:
            return [{"role": "system", "content": self._system}, *messages]
        return messages


def _without_prefix(shard_seed: int, index: int) -> bool:
    """`compare_prefix`'s seeded draw: whether request `index` goes without the shared prefix."""
    return bool(np.random.default_rng([shard_seed, index, 0x9F1]).random() < 0.5)


def request_body(spec: RunSpec, prompt: Prompt) -> dict[str, Any]:
    """The JSON body for one request (the target adds model/stream/stream_options); speech in:
    the upload's fields (loadgen.targets.apis.transcription), speech out: `input`, `voice` and
    the audio's formats; the adapter, when the workload names adapters, is named as
    `workload.adapter_field` says."""
    t = spec.target
    body: dict[str, Any] = {"max_tokens": prompt.max_tokens}
    a = spec.workload.audio
    if prompt.audio is not None:
        clip = prompt.audio
        body = {"file": clip.data, "filename": clip.name, "file_type": clip.content_type}
        if a is not None and a.language:
            body["language"] = a.language
        body["response_format"] = a.response_format if a is not None else "json"
    elif t.api == SPEECH_API:
        spoken = [m["content"] for m in prompt.messages if m["role"] != "system"]
        body = {"input": "\n\n".join(spoken)}
        body["voice"] = a.voice if a is not None else "alloy"
        body["response_format"] = a.format if a is not None else "pcm"
        if a is not None and a.stream_format == "sse":
            body["stream_format"] = "sse"
    elif is_chat(t.api):
        body["messages"] = prompt.messages
    else:
        body["prompt"] = "\n\n".join(m["content"] for m in prompt.messages)
    if t.ignore_eos and prompt.audio is None and t.api != SPEECH_API:
        body["ignore_eos"] = True
    out = spec.workload.output
    if out is not None and out.json_schema is not None:
        fmt = {"name": out.schema_name, "schema": out.json_schema, "strict": True}
        body["response_format"] = {"type": "json_schema", "json_schema": fmt}
    elif out is not None:
        body["tools"], body["tool_choice"] = out.tools, out.tool_choice
    for k, v in spec.labels.generation.items():
        body.setdefault(k, v)
    for k, v in t.extra_body.items():
        body[k] = v
    if prompt.adapter is not None:
        adapter = next(x for x in spec.workload.adapters if x.name == prompt.adapter)
        name_adapter(body, spec.workload, adapter)
    return body


def load_dataset(path: str) -> list[dict[str, Any]]:
    """Read a JSONL dataset: one object per line with "prompt" (str), optional "output_tokens"."""
    rows: list[dict[str, Any]] = []
    p = Path(path)
    for lineno, row in jsonl_rows(p):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise SpecError(f'line {lineno}: needs a string "prompt"', where=str(p))
        if "\x00" in row["prompt"]:
            raise SpecError(
                f'line {lineno}: "prompt" holds a NUL character (the store cannot keep it)',
                where=str(p),
            )
        ot = row.get("output_tokens")
        if ot is not None and (not isinstance(ot, int) or ot < 1):
            raise SpecError(
                f'line {lineno}: "output_tokens" must be a positive integer', where=str(p)
            )
        rows.append(row)
    if not rows:
        raise SpecError("dataset is empty", where=str(p))
    return rows


def calibrate_tokens_per_word(samples: list[tuple[int, int]]) -> float:
    """Tokens per synthetic word from (words sent, prompt_tokens reported) probe pairs.

    With two or more probes of different sizes the slope cancels the chat template's fixed
    overhead; with one, the ratio is used. Returns 1.0 when usage was never reported.
    """
    pts = [(w, t) for w, t in samples if w > 0 and t > 0]
    if not pts:
        return 1.0
    if len({w for w, _ in pts}) >= 2:
        ws = np.array([w for w, _ in pts], dtype=float)
        ts = np.array([t for _, t in pts], dtype=float)
        slope = float(np.polyfit(ws, ts, 1)[0])
        if slope > 0:
            return slope
    w, t = pts[-1]
    return t / w
