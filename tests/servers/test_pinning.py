"""`--pin`: which cores and threads the server gets (pure: the cores are passed in)."""

from __future__ import annotations

from specreg.servers.pinning import MIN_CORES, Pinning, server_pinning


def test_few_cores_keep_every_core_for_the_server() -> None:
    """On 2 cores pinning left the server one thread, which cost draft-simple far more than the
    baseline (pinning.py: 0.68x pinned against 2.47x not, SmolLM2 k16): below MIN_CORES the
    server keeps the build's threads on every core, and `--threads` still sets the count."""
    assert MIN_CORES == 4
    assert server_pinning(None, True, [0, 1]) == Pinning(None, None)
    assert server_pinning(None, True, [0, 1, 2]) == Pinning(None, None)
    assert server_pinning(2, True, [0, 1]) == Pinning(2, None)


def test_enough_cores_leave_one_to_the_client() -> None:
    assert server_pinning(None, True, [0, 1, 2, 3]) == Pinning(3, (0, 1, 2))
    assert server_pinning(2, True, [0, 1, 2, 3]) == Pinning(2, (0, 1, 2))
    assert server_pinning(8, True, [0, 1, 2, 3]) == Pinning(8, None)  # more than the cores left: not bound
    assert server_pinning(None, False, [0, 1, 2, 3]) == Pinning(None, None)
