"""Displays of big models stay short: `optx.summary` and the stateful optimizers' reprs."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_summary import parse_html

import optx

LAYERS = {f"layer{i}": {"kernel": jnp.zeros((64, 64)), "bias": jnp.zeros(64)} for i in range(100)}
SMALL = {"a": jnp.zeros((3, 2)), "b": jnp.zeros(2), "c": jnp.zeros((), jnp.bfloat16)}
FUNCTIONAL = {
    "adamw": lambda: optx.adamw(1e-3),
    "clip_adamw": lambda: optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3)),
}


def grads_of(params):
    return jax.tree.map(lambda p: jnp.full(p.shape, 0.5, p.dtype), params)


def built_adamw(params, **kwargs):
    opt = optx.optimizers.AdamW(use_ema=True, **kwargs)
    opt.apply(grads_of(params), params)
    return opt


def assert_short(page: str, text: str) -> None:
    """Under 60 table rows (folded ones included) and 10 KB of HTML; under 30 lines of text."""
    parse_html(page)  # well formed
    assert page.count("<tr") < 60, page.count("<tr")
    assert len(page.encode()) < 10_000, len(page.encode())
    assert len(text.splitlines()) < 30, text


def cells(page: str) -> list[list[str]]:
    """The cells of every row of the HTML tables in ``page`` (nested tables aside)."""
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", page)]


# ---------------------------------------------------------------------------------------
# optx.summary


@pytest.mark.parametrize("make", FUNCTIONAL.values(), ids=FUNCTIONAL.keys())
def test_summary_of_a_100_layer_model_is_short(make) -> None:
    tx = make()
    state = tx.init(LAYERS)
    s = optx.summary(state, tx)
    page, text = s._repr_html_(), str(s)
    assert_short(page, text)
    slots = [r for r in s.rows if r.kind == "slot"]
    assert len(slots) == 400  # mu and nu of 200 parameters: all still in `rows`
    assert "<details><summary>400 slot arrays, one row each" in page
    # HTML folds the first 10 arrays; text shows 5.
    assert page.count("... and 390 more") == 1 and text.count("... and 395 more") == 1
    assert "by dtype: float32" in text and "slots for 200 parameters" in text
    assert s.num_parameters == 200
    mu = next(line for line in text.splitlines() if re.search(r"\bslot\s+mu\b", line))
    nbytes = str(100 * (64 * 64 + 64) * 4)
    assert " ".join(mu.split()[2:]) == f"200 100 x (64,), 100 x (64, 64) float32 {nbytes}"


@pytest.mark.parametrize("make", FUNCTIONAL.values(), ids=FUNCTIONAL.keys())
def test_grouped_totals_are_the_sums_of_the_rows(make) -> None:
    tx = make()
    state = tx.init(LAYERS)
    s = optx.summary(state, tx)
    leaves = jax.tree.leaves(state)
    assert s.total_bytes == sum(np.asarray(x).nbytes for x in leaves)
    assert sum(g.nbytes for g in s.groups) == s.total_bytes
    assert sum(s.bytes_by_dtype.values()) == s.total_bytes
    assert [r for g in s.groups for r in g.rows] == list(s.rows)
    for g in s.groups:
        assert g.nbytes == sum(r.nbytes for r in g.rows)
        assert {(r.where, r.owner, r.kind) for r in g.rows} == {(g.where, g.owner, g.kind)}
    # What the HTML shows is what the groups hold.
    shown = {(c[3], c[4]): int(c[7]) for c in cells(s._repr_html_()) if len(c) >= 9}
    for g in s.groups:
        assert shown[(g.name, str(len(g.rows)))] == g.nbytes


def test_summary_of_a_stateful_optimizer() -> None:
    opt = built_adamw(LAYERS)
    s = optx.summary(opt)
    assert_short(s._repr_html_(), str(s))
    assert s.num_parameters == 200
    assert sum(g.nbytes for g in s.groups) == s.total_bytes
    slots = {g.name: g for g in s.groups if g.kind == "slot"}
    assert {name: len(g.rows) for name, g in slots.items()} == {"mu": 200, "nu": 200, "ema": 200}
    # The same arrays as the optimizer's variables, under Keras's slot names.
    variables = opt.variables
    for name, keras in {"mu": "momentum", "nu": "velocity", "ema": "average"}.items():
        keys = [k for k in variables if k.startswith(f"adam_w/{keras}/")]
        assert slots[name].nbytes == sum(int(variables[k].nbytes) for k in keys)
    hyper = {r.name: r.value for r in s.rows if r.kind == "hyperparameter"}
    assert hyper["beta_1"] == pytest.approx(0.9)


def test_summary_marks_scheduled_hyperparameters() -> None:
    tx = optx.adamw(optx.schedules.cosine_decay_schedule(1e-3, 100))
    s = optx.summary(tx.init(LAYERS), tx)
    lr = next(g for g in s.groups if g.name == "learning_rate")
    assert lr.scheduled and lr.value == pytest.approx(1e-3)
    assert not next(g for g in s.groups if g.name == "b1").scheduled
    line = next(x for x in str(s).splitlines() if "learning_rate" in x and "hyper" in x)
    assert line.rstrip().endswith("schedule: 0.001"), line
    assert "<td>schedule: 0.001</td>" in s._repr_html_()


def test_small_states_show_every_row() -> None:
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.adamw(1e-3))
    s = optx.summary(tx.init(SMALL), tx)
    page, text = s._repr_html_(), str(s)
    assert len(s.rows) <= 30
    assert "<details>" not in page and "more" not in page and "more" not in text
    assert page.count("<tr") == len(s.rows) + 1
    assert len(text.splitlines()) == len(s.rows) + 2
    for slot in ("mu", "nu"):
        for leaf in SMALL:
            assert f"{slot}/{leaf}" in text and f"<td>{slot}/{leaf}</td>" in page


def test_summary_rejects_a_transform_with_a_stateful_optimizer() -> None:
    opt = optx.optimizers.AdamW()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`summary` needs a built optimizer. Call `optimizer.build(params)` first (`apply` "
            "builds on its first call). Received: an optimizer 'adam_w' that was never built."
        ),
    ):
        optx.summary(opt)
    opt.build(SMALL)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`summary` needs transform=None for a stateful optimizer, which knows its own. "
            "Received: transform=chain(scale_by_adam("
        ),
    ):
        optx.summary(opt, optx.adamw(1e-3))


# ---------------------------------------------------------------------------------------
# Stateful optimizers


def test_stateful_displays_of_a_100_layer_model_are_short() -> None:
    opt = built_adamw(LAYERS)
    page, text = opt._repr_html_(), repr(opt)
    assert_short(page, text)
    assert len(text.splitlines()) == 4
    assert "built for 200 parameters; iterations=1" in text
    assert "momentum (200 arrays, 1.6 MiB)" in text and "average (200 arrays" in text
    assert "<details><summary>600 slot arrays, one row each</summary>" in page
    assert page.count("... and 590 more") == 1
    # The first rows of the fold, in the small model's form.
    assert "<td>layer0/bias</td><td>average</td><td>(64,)</td><td>float32</td>" in page
    slot_bytes = 100 * (64 * 64 + 64) * 4
    for slot in ("momentum", "velocity", "average"):
        assert (
            f"<tr><td>{slot}</td><td>200</td><td>100 x (64,), 100 x (64, 64)</td>"
            f"<td>float32</td><td>{slot_bytes}</td></tr>"
        ) in page


def test_stateful_totals_are_the_sums_of_the_variables() -> None:
    opt = built_adamw(LAYERS)
    variables = opt.variables
    total = sum(int(v.nbytes) for v in variables.values())
    by_dtype: dict[str, int] = {}
    for v in variables.values():
        by_dtype[v.dtype.name] = by_dtype.get(v.dtype.name, 0) + int(v.nbytes)
    assert sum(by_dtype.values()) == total
    line = optx._src.display.bytes_by_dtype(by_dtype.items())
    expected = f"state {optx._src.display.format_bytes(total)} ({line})"
    assert expected in repr(opt) and expected in opt._repr_html_()
    grouped = [c for c in cells(opt._repr_html_()) if len(c) == 5 and c[0] != "hyperparameter"]
    slot_keys = [k for k in variables if re.match(r"adam_w/(momentum|velocity|average)/", k)]
    assert sum(int(c[4]) for c in grouped) == sum(int(variables[k].nbytes) for k in slot_keys)
    assert sum(int(c[1]) for c in grouped) == len(slot_keys) == 600


def test_stateful_shows_scheduled_hyperparameters() -> None:
    schedule = optx.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    opt = built_adamw(SMALL, learning_rate=schedule)
    opt.apply(grads_of(SMALL), SMALL)
    # The value in force in the last step (step 1: 0.1 * 0.5).
    assert "learning_rate=0.05 (schedule)" in repr(opt)
    assert "beta_1=0.9," in repr(opt)
    assert "<td>learning_rate</td><td>schedule: 0.05</td>" in opt._repr_html_()
    assert "<td>beta_1</td><td>0.9</td>" in opt._repr_html_()


def test_stateful_small_model_lists_every_leaf() -> None:
    opt = built_adamw(SMALL)
    page = opt._repr_html_()
    assert "<details>" not in page and "more" not in page
    for leaf in SMALL:
        for slot in ("momentum", "velocity", "average"):
            assert f"<td>{leaf}</td><td>{slot}</td>" in page
    assert page.count("<tr") == 1 + len(optx._src.stateful.views.hyperparameters(opt)) + 1 + 9


def test_full_up_to_30_rows_then_grouped() -> None:
    def summary_of(n):
        return optx.summary(optx.adam(1e-3).init({f"w{i}": jnp.zeros(2) for i in range(n)}))

    full, grouped = summary_of(11), summary_of(12)
    assert (len(full.rows), len(grouped.rows)) == (29, 31)
    assert full._repr_html_().count("<tr") == 30 and "<details>" not in full._repr_html_()
    assert "<details>" in grouped._repr_html_() and "by dtype" in str(grouped)


def test_scalar_parameters_group_with_their_slots() -> None:
    params = {f"layer{i}": {"kernel": jnp.zeros((4, 4)), "scale": jnp.zeros(())} for i in range(50)}
    tx = optx.adam(1e-3)
    s = optx.summary(tx.init(params), tx)
    assert_short(s._repr_html_(), str(s))
    shown = {(g.kind, g.name): len(g.rows) for g in s.groups if g.name in ("mu", "nu")}
    assert shown == {
        ("slot", "mu"): 50,
        ("scalar", "mu"): 50,
        ("slot", "nu"): 50,
        ("scalar", "nu"): 50,
    }
    assert s.num_parameters == 100
    assert "200 slot arrays, one row each" in s._repr_html_()


def test_many_sections_cap_the_grouped_table() -> None:
    params = {f"p{i}": jnp.zeros(2) for i in range(40)}
    tx = optx.partition(
        {f"l{i}": optx.sgd(0.1, momentum=0.9) for i in range(40)},
        {f"^p{i}$": f"l{i}" for i in range(40)},
    )
    s = optx.summary(tx.init(params), tx)
    page, text = s._repr_html_(), str(s)
    assert len(s.groups) > 30
    hidden = f"... and {len(s.groups) - 30} more"
    assert hidden in page and hidden in text
    assert page.count("<tr") < 60 and len(text.splitlines()) < 50
