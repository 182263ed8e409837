"""Run specs: the minimal spec is accepted as written; bad specs name the field and the fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.checks.specfile import load_spec
from loadgen.errors import SpecError
from loadgen.runspec.lengths import FixedLength, UniformLength

MINIMAL = """
name = "smoke"
[target]
api = "openai-chat"
base_url = "http://127.0.0.1:8000/v1"
model = "m"
[workload]
prompt_tokens = 64
output_tokens = 128
[load]
concurrency = [1, 16]
duration_s = 10
"""

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.toml"))


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.toml"
    p.write_text(text)
    return p


def test_minimal_spec_is_accepted_as_written(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.workload.prompt_tokens == FixedLength(value=64)
    assert spec.workload.output_tokens == FixedLength(value=128)
    assert spec.load.concurrency == [1, 16]
    assert spec.regions[0].share == 1.0
    assert spec.store_content is False


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_spec_is_valid(path: Path) -> None:
    if path.stem.startswith("locust"):  # a Locust test's spec: Locust makes the load
        from loadgen.locust.spec import locust_spec

        locust_spec(path, {}, None, where=str(path))
    else:
        load_spec(path)


def test_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {
        "smoke",
        "sweep",
        "poisson",
        "saturation",
        "trace",
        "multiturn",
        "hosted",
        "regions",
    } <= names


def test_richer_length_forms(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "prompt_tokens = 64", 'prompt_tokens = {dist = "uniform", min = 10, max = 20}'
    )
    spec = load_spec(write(tmp_path, text))
    assert spec.workload.prompt_tokens == UniformLength(dist="uniform", min=10, max=20)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("concurrency = [1, 16]", "concurrency = [1, -2]"), "load.concurrency: level 1 is -2"),
        (("duration_s = 10", "duration_s = 0"), "load.duration_s: Input should be greater than 0"),
        (('model = "m"', 'model = "m"\nbogus = 1'), "target.bogus: unknown field"),
        (("http://127.0.0.1:8000/v1", "ftp://x/v1"), "target.base_url: must start with http"),
        (
            ("concurrency = [1, 16]", "concurrency = [1]\nrate = [5.0]"),
            "choose exactly one load model",
        ),
        (("concurrency = [1, 16]", "rate = [0.0]"), "a rate must be positive"),
        (
            ("prompt_tokens = 64", 'prompt_tokens = {dist = "uniform", min = 9, max = 2}'),
            "max (2) is below min (9)",
        ),
        (('api = "openai-chat"', 'api = "grpc"'), "target.api"),
    ],
)
def test_bad_specs_name_the_field(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    path = write(tmp_path, MINIMAL.replace(*edit))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_malformed_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "name = \n"))
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "nope.toml")


def test_secret_headers_and_url_credentials_are_refused(tmp_path: Path) -> None:
    bad = MINIMAL.replace('model = "m"', 'model = "m"\nheaders = {Authorization = "Bearer sk-123"}')
    with pytest.raises(SpecError, match="would store a secret"):
        load_spec(write(tmp_path, bad))
    cred = MINIMAL.replace("http://127.0.0.1:8000/v1", "http://u:p@127.0.0.1:8000/v1")
    with pytest.raises(SpecError, match="credentials in the URL"):
        load_spec(write(tmp_path, cred))


def test_region_shares_must_add_up(tmp_path: Path) -> None:
    text = (
        MINIMAL + '\n[[regions]]\nname = "eu"\nshare = 0.5\n[[regions]]\nname = "us"\nshare = 0.4\n'
    )
    with pytest.raises(SpecError, match="add up to 1"):
        load_spec(write(tmp_path, text))


def test_warmup_and_cooldown_must_fit(tmp_path: Path) -> None:
    text = MINIMAL.replace("duration_s = 10", "duration_s = 10\nwarmup_s = 6\ncooldown_s = 4")
    with pytest.raises(SpecError, match="must be shorter than duration_s"):
        load_spec(write(tmp_path, text))


def test_keys_in_the_query_are_named_never_written(tmp_path: Path) -> None:
    leaky = MINIMAL.replace("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1?key=sk-123")
    with pytest.raises(SpecError, match="looks like a credential"):
        load_spec(write(tmp_path, leaky))
    named = MINIMAL.replace('model = "m"', 'model = "m"\napi_key_env = "K"\napi_key_query = "key"')
    assert load_spec(write(tmp_path, named)).target.api_key_query == "key"
    orphan = MINIMAL.replace('model = "m"', 'model = "m"\napi_key_query = "key"')
    with pytest.raises(SpecError, match="api_key_env must name the key"):
        load_spec(write(tmp_path, orphan))
