"""`optx.summary` and the HTML displays of transforms (`Transform._repr_html_`)."""

from __future__ import annotations

import html.parser
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from multidevice import run_on_devices

import optx

PARAMS = {"dense": {"kernel": jnp.ones((3, 2)), "bias": jnp.ones(2, jnp.bfloat16)}}
GRADS = jax.tree.map(lambda p: jnp.full(p.shape, 0.5, p.dtype), PARAMS)
VOID = {"br", "hr", "img", "meta", "input", "link"}


class _TagChecker(html.parser.HTMLParser):
    """Collects the text of an HTML fragment; fails on unbalanced tags."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in VOID:
            self.stack.append(tag)
        self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, (self.stack, tag)
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse_html(fragment: str) -> _TagChecker:
    checker = _TagChecker()
    checker.feed(fragment)
    checker.close()
    assert not checker.stack, f"unclosed tags: {checker.stack}"
    return checker


def rows_of(s: optx.Summary, where: str) -> dict[str, optx._src.summary.SummaryRow]:
    return {r.name: r for r in s.rows if r.where == where}


# ---------------------------------------------------------------------------------------
# Rows and totals


def test_rows_of_an_adam_state_match_the_state() -> None:
    tx = optx.adam(1e-3, b1=0.8)
    state = tx.init(PARAMS)
    s = optx.summary(state, tx)
    leaves = jax.tree.leaves(state)
    assert s.num_arrays == len(leaves)
    assert s.total_bytes == sum(np.asarray(x).nbytes for x in leaves)
    adam = rows_of(s, "0")
    assert {r.owner for r in adam.values()} == {"scale_by_adam"}
    kernel = adam["mu/dense/kernel"]
    assert (kernel.kind, kernel.shape, kernel.dtype, kernel.nbytes, kernel.value) == (
        "slot",
        (3, 2),
        "float32",
        24,
        None,
    )
    bias = adam["nu/dense/bias"]
    assert (bias.shape, bias.dtype, bias.nbytes) == ((2,), "bfloat16", 4)
    assert (adam["count"].kind, adam["count"].value) == ("counter", 0)
    # Decays are stored as 1 - b; the summary shows b, as get_hyperparams does.
    hyper = optx.get_hyperparams(state)
    for name in ("b1", "b2", "eps", "eps_root"):
        assert adam[name].kind == "hyperparameter"
        np.testing.assert_allclose(adam[name].value, float(hyper[name]), rtol=1e-7)
    np.testing.assert_allclose(adam["b1"].value, 0.8, rtol=1e-6)
    lr = rows_of(s, "1")["learning_rate"]
    assert (lr.owner, lr.kind) == ("scale_by_learning_rate", "hyperparameter")
    np.testing.assert_allclose(lr.value, 1e-3, rtol=1e-6)
    # Hyperparameters first (by name), then counters, then slots.
    kinds = [r.kind for r in s.rows if r.where == "0"]
    assert kinds == sorted(kinds, key=("hyperparameter", "counter", "scalar", "slot").index)


def test_without_transform_sections_are_named_by_state_type() -> None:
    state = optx.adam(1e-3).init(PARAMS)
    s = optx.summary(state)
    assert {(r.where, r.owner) for r in s.rows} == {
        ("0", "ScaleByAdamState"),
        ("1", "ScaleByLearningRateState"),
    }


def test_wrappers_and_combinators_are_walked() -> None:
    tx = optx.dynamic_loss_scale(
        optx.named_chain(
            ("clip", optx.clip_by_global_norm(1.0)),
            (
                "opt",
                optx.partition(
                    {"a": optx.sgd(0.1, momentum=0.9), "b": optx.set_to_zero()},
                    {"kernel": "a", ".*": "b"},
                ),
            ),
        ),
        initial_scale=4.0,
    )
    s = optx.summary(tx.init(PARAMS), tx)
    sections = {(r.where, r.owner) for r in s.rows}
    assert sections == {
        ("", "dynamic_loss_scale"),
        ("inner_state/clip", "clip_by_global_norm"),
        ("inner_state/opt/inner_states/a/inner_state/0", "trace"),
        ("inner_state/opt/inner_states/a/inner_state/1", "scale_by_learning_rate"),
    }
    top = rows_of(s, "")
    assert (top["scale"].kind, top["scale"].value) == ("scalar", 4.0)
    assert top["initial_scale"].kind == "hyperparameter"
    trace = rows_of(s, "inner_state/opt/inner_states/a/inner_state/0")
    assert trace["trace/dense/kernel"].shape == (3, 2)
    # Only the kernel is routed to "a": the masked bias holds no array.
    assert not any("bias" in r.name for r in s.rows)


def test_state_of_optax_transforms() -> None:
    tx = optax.chain(
        optax.clip_by_global_norm(1.0), optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
    )
    state = tx.init(PARAMS)
    s = optx.summary(state, tx)
    assert s.num_arrays == len(jax.tree.leaves(state))
    injected = rows_of(s, "1")
    np.testing.assert_allclose(injected["learning_rate"].value, 0.1, rtol=1e-6)
    assert injected["learning_rate"].kind == "hyperparameter"
    assert rows_of(s, "1/inner_state/0")["mu/dense/kernel"].shape == (3, 2)


def test_jitted_traced_and_abstract_states() -> None:
    tx = optx.chain(optx.clip_by_global_norm(1.0), optx.adam(1e-2))
    state = tx.init(PARAMS)
    _, state = jax.jit(tx.update)(GRADS, state, PARAMS)
    concrete = optx.summary(state, tx)
    assert rows_of(concrete, "1/0")["count"].value == 1

    seen = []

    @jax.jit
    def inside(state):
        seen.append(optx.summary(state, tx))
        return state

    inside(state)
    abstract = optx.summary(jax.eval_shape(tx.init, PARAMS), tx)
    for traced in (seen[0], abstract):
        assert all(r.value is None for r in traced.rows)
        strip = [r._replace(value=None) for r in concrete.rows]
        assert list(traced.rows) == strip
        assert traced.total_bytes == concrete.total_bytes
    assert "count" in str(abstract) and "(3, 2)" in str(abstract)


@pytest.mark.multidevice
def test_sharded_arrays_show_their_spec() -> None:
    out = run_on_devices(
        """
        import jax, jax.numpy as jnp, numpy as np, optx
        from jax.sharding import NamedSharding, PartitionSpec as P
        mesh = jax.make_mesh((8,), ("data",))
        tx = optx.adam(1e-3)
        state = tx.init({"w": jnp.zeros((16, 4))})
        def place(x):
            spec = P("data", None) if np.ndim(x) == 2 else P()
            return jax.device_put(x, NamedSharding(mesh, spec))
        s = optx.summary(jax.tree.map(place, state), tx)
        got = {r.name: r.sharding for r in s.rows if r.where == "0"}
        assert got["mu/w"] == "P('data', None)", got
        assert got["count"] == "P()", got
        # b1 with its float32 residual; 7 scalars and 2 residuals in all.
        assert s.rows[0].nbytes == 8 and s.total_bytes == 2 * 16 * 4 * 4 + 9 * 4
        assert "sharding" in str(s).splitlines()[1]
        print("ok")
        """
    )
    assert out.strip() == "ok"


# ---------------------------------------------------------------------------------------
# Text and HTML


def test_text_table_is_aligned() -> None:
    tx = optx.adam(1e-3)
    state = tx.init({"w": jnp.zeros((200, 300))})
    s = optx.summary(state, tx)
    lines = str(s).splitlines()
    assert repr(s) == str(s)
    total = sum(np.asarray(x).nbytes for x in jax.tree.leaves(state))
    assert lines[0] == f"optimizer state: 11 arrays, {total / 1024:.1f} KiB ({total} B)"
    header = lines[1]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    assert header.split() == [
        "where",
        "owner",
        "kind",
        "name",
        "shape",
        "dtype",
        "bytes",
        "value",
    ]
    for line in lines[2:]:
        # Every cell starts at its column's start.
        for m in re.finditer(r"(?<=  )\S|^\S", line):
            assert m.start() in starts, (line, m.start())
    mu = next(line for line in lines if "mu/w" in line)
    assert mu.split()[-4:] == ["(200,", "300)", "float32", "240000"]
    lr = next(line for line in lines if "learning_rate" in line)
    assert lr.split()[-1] == "0.001"


def test_summary_html_is_well_formed_and_escaped() -> None:
    tx = optx.named_chain(("<odd & name>", optx.sgd(0.25, momentum=0.5)))
    s = optx.summary(tx.init(PARAMS), tx)
    page = s._repr_html_()
    parsed = parse_html(page)
    text = "".join(parsed.text)
    assert "<odd & name>/0" in text and "&lt;odd &amp; name&gt;/0" in page
    assert "0.25" in text and "trace/dense/kernel" in text and "(3, 2)" in text
    assert f"{s.num_arrays} arrays" in text
    assert parsed.tags.count("tr") == len(s.rows) + 1


def test_transform_html_nests_chains_and_names_callables() -> None:
    def my_schedule(count):
        return 0.1 / (count + 1)

    tx = optx.chain(
        optx.clip_by_global_norm(2.0),
        optx.named_chain(("opt", optx.sgd(my_schedule, momentum=0.9))),
        optx.stateless(lambda u, p: u),
        optx.partition({"x": optx.adam(0.5), "y": optx.set_to_zero()}, {".*": "x"}),
        optax.scale_by_adam(),
    )
    page = tx._repr_html_()
    parsed = parse_html(page)
    text = "".join(parsed.text)
    for shown in ("chain", "clip_by_global_norm", "max_norm", "2.0", "named_chain", "opt"):
        assert shown in text, shown
    assert "my_schedule" in text and "function" not in text
    assert "<lambda>" in text and "&lt;lambda&gt;" in page
    assert "scale_by_adam" in text  # optax's, by its factory's name
    # Nested tables: one per transform with arguments, plus the lists of transforms.
    assert page.count("<table>") >= 8
    rows = re.findall(r"<tr><td>(\w+)</td><td>([^<]*)</td><td>(\w*)</td></tr>", page)
    kinds = {name: kind for name, _, kind in rows}
    assert kinds["max_norm"] == "dynamic" and kinds["learning_rate"] in {"schedule", "dynamic"}
    assert ("learning_rate", "my_schedule", "schedule") in rows
    assert ("learning_rate", "0.5", "dynamic") in rows
    assert optx.scale(-1.0)._repr_html_() == (
        "<div><strong>scale</strong><table><tr><th>argument</th><th>value</th><th>kind</th>"
        "</tr><tr><td>step_size</td><td>-1.0</td><td>dynamic</td></tr></table></div>"
    )
    assert optx.identity()._repr_html_() == "<div><strong>identity</strong></div>"


def test_stateful_html_is_well_formed() -> None:
    opt = optx.optimizers.Adam(0.1)
    opt.apply(GRADS, PARAMS)
    text = "".join(parse_html(opt._repr_html_()).text)
    assert "learning_rate" in text and "dense/kernel" in text and "(3, 2)" in text


# ---------------------------------------------------------------------------------------
# Errors


def test_errors() -> None:
    tx = optx.adam(1e-3)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`summary` needs an optimizer state (what `init` returns), not a transform. "
            "Received: state=chain(scale_by_adam("
        ),
    ):
        optx.summary(tx)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "`summary` needs transform to be a transform with `init` and `update`, or None. "
            "Received: transform='adam'."
        ),
    ):
        optx.summary(tx.init(PARAMS), "adam")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`summary` needs the state made by the transform's `init`. Received: at "
            "'(top)', a state of type tuple for `chain`, which makes a tuple of 3 states."
        ),
    ):
        optx.summary(tx.init(PARAMS), optx.chain(tx, tx, tx))
    named = optx.named_chain(("a", tx))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Received: at 'a', a state of type ScaleByAdamState for `chain`, which makes a "
            "tuple of 2 states."
        ),
    ):
        optx.summary({"a": tx.init(PARAMS)[0]}, named)
