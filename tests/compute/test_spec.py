"""JobSpec normalisation: loose input in, canonical types out, typed errors for bad input."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from portable.compute import (
    ComputeCapabilities,
    JobSpec,
    JobState,
    Resources,
    normalise_spec,
    parse_memory,
)
from portable.errors import InvalidArgument, InvalidKey, Unsupported
from portable.testing.compute_suite import BAD_SPECS


@pytest.mark.parametrize(
    ("given", "mib"),
    [(512, 512), ("512", 512), ("512Mi", 512), ("2Gi", 2048), ("2GiB", 2048), ("1G", 954), ("1.5Gi", 1536), ("800MB", 763), ("1Ti", 1048576)],
)
def test_parse_memory(given: object, mib: int) -> None:
    assert parse_memory(given) == mib


@pytest.mark.parametrize("given", [0, -1, "lots", "2 parsecs", "", True, None, [1], float("nan")])
def test_parse_memory_refuses(given: object) -> None:
    with pytest.raises(InvalidArgument):
        parse_memory(given)


def test_normalise_gives_canonical_types() -> None:
    spec = normalise_spec(
        JobSpec(command=["python", "x.py"], resources={"cpu": "500m", "memory": "1Gi", "gpu": 0}, timeout=5, labels={"a": "b"})
    )
    assert spec.command == ("python", "x.py")
    assert spec.resources == Resources(cpu=0.5, memory_mib=1024, gpu=0)
    assert spec.timeout == 5.0 and isinstance(spec.timeout, float)
    assert normalise_spec(JobSpec(command=["x"], resources=Resources(cpu=2))).resources == Resources(cpu=2.0)


def test_fingerprint_ignores_the_key_and_sees_the_rest() -> None:
    a = normalise_spec(JobSpec(command=["x"], idempotency_key="k1"))
    b = normalise_spec(JobSpec(command=["x"], idempotency_key="k2"))
    c = normalise_spec(JobSpec(command=["y"], idempotency_key="k1"))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert normalise_spec(JobSpec(command=["x"], env={"A": "1", "B": "2"})).fingerprint() == normalise_spec(
        JobSpec(command=["x"], env={"B": "2", "A": "1"})
    ).fingerprint()


def test_fingerprint_leaves_out_the_launching_trace() -> None:
    """TRACEPARENT/TRACESTATE say which trace launched a job, not what it runs: a resubmission from
    another trace under the same idempotency key is the same job."""
    bare = normalise_spec(JobSpec(command=["x"], env={"A": "1"}, idempotency_key="k"))
    traced = normalise_spec(
        JobSpec(
            command=["x"],
            env={"A": "1", "TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "TRACESTATE": "a=1"},
            idempotency_key="k",
        )
    )
    assert bare.fingerprint() == traced.fingerprint()
    assert traced.fingerprint() != normalise_spec(JobSpec(command=["x"], env={"A": "2"}, idempotency_key="k")).fingerprint()


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_specs(case: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        normalise_spec(JobSpec(**BAD_SPECS[case]))
    assert len(str(err.value)) > 10


def test_a_shell_line_gets_a_hint() -> None:
    with pytest.raises(InvalidArgument, match=r"shlex\.split"):
        normalise_spec(JobSpec(command="python train.py"))


def test_bad_name_is_invalid_key() -> None:
    with pytest.raises(InvalidKey):
        normalise_spec(JobSpec(command=["x"], name="-leading-dash"))


def test_gpus_need_the_capability() -> None:
    with pytest.raises(Unsupported):
        normalise_spec(JobSpec(command=["x"], resources={"gpu": 1}), ComputeCapabilities(gpus=False))
    assert normalise_spec(JobSpec(command=["x"], resources={"gpu": 1}), ComputeCapabilities(gpus=True)).resources.gpu == 1


def test_spot_needs_the_capability_and_a_bool() -> None:
    with pytest.raises(Unsupported, match="spot"):
        normalise_spec(JobSpec(command=["x"], resources={"spot": True}), ComputeCapabilities())
    spec = normalise_spec(JobSpec(command=["x"], resources={"spot": True}), ComputeCapabilities(spot=True))
    assert spec.resources == Resources(spot=True)
    assert normalise_spec(JobSpec(command=["x"], resources=Resources(spot=True)), ComputeCapabilities(spot=True)).resources.spot
    with pytest.raises(InvalidArgument, match="spot must be True or False"):
        normalise_spec(JobSpec(command=["x"], resources={"spot": "yes"}), ComputeCapabilities(spot=True))


def test_spot_is_in_the_fingerprint_and_old_digests_still_hold() -> None:
    plain = normalise_spec(JobSpec(command=["x"]))
    spot = normalise_spec(JobSpec(command=["x"], resources={"spot": True}), ComputeCapabilities(spot=True))
    assert plain.fingerprint() != spot.fingerprint()
    # the digest of a spec without spot is the one made before the field existed (records in stores keep matching)
    assert plain.fingerprint() == "216e17a7b1fca1a96a0964e9302dd353"  # main before spot, on the same spec


def test_states_and_capabilities() -> None:
    assert [s.terminal for s in JobState] == [False, False, True, True, True]
    assert "containers" in ComputeCapabilities.flag_names()
    assert ComputeCapabilities(preempt=True).supported() >= {"preempt", "logs", "cancel"}


@pytest.mark.parametrize(
    "module",
    ["portable.compute", "portable.checkpoint", "portable.driver.compute", "portable.testing.compute_suite", "portable.embedded.localjobs"],
)
def test_module_all_is_sorted_and_complete(module: str) -> None:
    mod = importlib.import_module(module)
    assert list(mod.__all__) == sorted(mod.__all__)
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_importing_compute_loads_no_dask() -> None:
    code = "import sys, portable.compute, portable.checkpoint; print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {'dask', 'distributed', 'portable_dask'})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_compute_loads_no_messaging() -> None:
    code = "import sys, portable.compute; print('portable.messaging' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
