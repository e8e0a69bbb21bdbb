"""The prediction's parts on real tiny GGUF summaries: family evidence moved to the candidate's
size, and the draft cost from the target's own measured pairs (issue 33's 0.41 / 2.17 ratios)."""

from __future__ import annotations

import math
from pathlib import Path

from specreg.audit.acceptance_prior import Point, bytes_ratio, fit_prior, logit, size_ratio
from specreg.audit.draft_prediction import Book, predict, step_cost
from specreg.gguf.summary import summarize
from specreg.schemas.drafts import ErrorStat
from specreg.testing import ModelSpec, write_model

TARGET = ModelSpec(name="Tiny-1B")


def _book(tmp_path: Path, alpha: float, cost: float) -> tuple[Book, dict[str, object]]:
    """A registry's evidence by hand: one measured pair, the target with its one-layer draft."""
    files = {
        "t": write_model(tmp_path / "t.gguf", TARGET),
        "small": write_model(tmp_path / "s.gguf", TARGET.but(n_layer=1, name="Tiny-100M")),
        "copy": write_model(tmp_path / "c.gguf", TARGET.but(noise=0.01, name="Tiny-1B-copy")),
    }
    s = {k: summarize(p) for k, p in files.items()}
    shas = {k: f"{k:0<64}" for k in s}
    point = Point(
        (shas["t"], shas["small"], "draft-simple"),
        math.log10(size_ratio(s["t"], s["small"])),
        0.0,
        alpha,
        cost - bytes_ratio(s["t"], s["small"]),
        1.1,
    )
    book = Book({}, {shas[k]: v for k, v in s.items()}, [point], fit_prior([point]), ErrorStat(n_pairs=0), (0.8, 1.5))
    return book, {"s": s, "sha": shas, "point": point}


def test_a_family_pair_of_another_size_is_moved_to_the_candidates_size(tmp_path: Path) -> None:
    book, x = _book(tmp_path, alpha=0.8, cost=0.9)
    s, sha, point = x["s"], x["sha"], x["point"]
    assert isinstance(s, dict) and isinstance(sha, dict) and isinstance(point, Point)
    p = predict(book, "draft-simple", s["t"], s["copy"], sha["t"], sha["copy"])
    assert p.source == "same families"
    # r: the small pair's offset (0.9 - its bytes ratio) plus the copy's own bytes ratio, not 0.9
    want_r = point.cost_offset + bytes_ratio(s["t"], s["copy"])  # type: ignore[operator]
    assert p.draft_cost is not None and abs(p.draft_cost - want_r) < 1e-9 and p.draft_cost > 0.9
    # alpha: logit moved along the prior's slope by the size difference (a full copy agrees more)
    shift = book.prior.b * (math.log10(size_ratio(s["t"], s["copy"])) - point.log_ratio)
    assert p.alpha is not None and abs(logit(p.alpha) - (logit(0.8) + shift)) < 1e-6 and p.alpha > 0.8


def test_the_draft_cost_comes_from_the_targets_own_pairs_before_the_global_offset(tmp_path: Path) -> None:
    book, x = _book(tmp_path, alpha=0.8, cost=0.95)  # a tiny target: a decode is mostly fixed cost
    s, sha, point = x["s"], x["sha"], x["point"]
    assert isinstance(s, dict) and isinstance(sha, dict) and isinstance(point, Point)
    br = 0.3
    prior = book.prior.model_copy(update={"draft_cost_offset": 0.0})
    assert abs(step_cost(book, sha["t"], br, prior) - (point.cost_offset + br)) < 1e-9  # type: ignore[operator]
    assert step_cost(book, "another target", br, prior) == br  # no run of it: the prior's offset
    assert step_cost(book, sha["t"], br, prior, skip=point.key) == br  # out of sample: not its own
