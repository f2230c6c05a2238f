"""`plot` of schedules: one line per schedule with its values and label (Agg backend)."""

import io
import re
import sys

import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import optx
from optx.schedules import plot, warmup_inverse_sqrt_schedule, warmup_stable_decay_schedule

matplotlib.use("Agg")

WSD = warmup_stable_decay_schedule(1.0, 10, 20, 30, decay_type="1-sqrt")
ISQ = warmup_inverse_sqrt_schedule(1.0, 10)


def halving(count):
    return 0.5 ** (count / 10)


def lines(fig):
    (ax,) = fig.axes
    return ax.get_lines()


def legend(fig):
    leg = fig.axes[0].get_legend()
    return None if leg is None else [t.get_text() for t in leg.get_texts()]


def test_one_schedule():
    fig = plot(WSD, 70)
    (line,) = lines(fig)
    np.testing.assert_array_equal(line.get_xdata(), np.arange(70))
    expected = [float(WSD(t)) for t in range(70)]
    np.testing.assert_allclose(line.get_ydata(), expected, rtol=1e-6, atol=1e-7)
    assert line.get_label() == "warmup_stable_decay_schedule"
    assert legend(fig) is None
    assert fig.axes[0].get_xlabel() == "step"
    fig.savefig(io.BytesIO(), format="png")


def test_several_schedules_with_labels():
    fig = plot([WSD, ISQ, halving], 50, labels=["wsd", "rsqrt", "exp"])
    assert len(lines(fig)) == 3
    assert [line.get_label() for line in lines(fig)] == ["wsd", "rsqrt", "exp"]
    assert legend(fig) == ["wsd", "rsqrt", "exp"]
    np.testing.assert_allclose(lines(fig)[2].get_ydata(), 0.5 ** (np.arange(50) / 10), rtol=1e-6)


def test_default_labels_and_legend():
    fig = plot((WSD, ISQ, halving), 5)
    assert legend(fig) == [
        "warmup_stable_decay_schedule",
        "warmup_inverse_sqrt_schedule",
        "halving",
    ]


def test_given_steps_axes_and_log_scale():
    import matplotlib.figure

    fig = matplotlib.figure.Figure()
    ax = fig.add_subplot()
    steps = np.array([0, 10, 100, 1000, 10_000])
    assert plot(ISQ, steps, ax=ax, logy=True) is fig
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_xdata(), steps)
    np.testing.assert_allclose(line.get_ydata(), [0, 1, 10**-0.5, 0.1, 10**-1.5], rtol=1e-6)
    assert ax.get_yscale() == "log"
    assert plot(optx.schedules.constant_schedule(0.1), jnp.arange(3)).axes[0].get_lines()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: plot([WSD, ISQ], 10, labels=["one"]),
            ValueError,
            "`plot` needs one label per schedule (2). Received: labels=['one'].",
        ),
        (
            lambda: plot(WSD, 10, labels="wsd"),
            ValueError,
            "`plot` needs one label per schedule (1). Received: labels='wsd'.",
        ),
        (lambda: plot(WSD, 0), ValueError, "`plot` needs steps >= 1. Received: steps=0."),
        (
            lambda: plot(WSD, np.linspace(0, 1, 3)),
            ValueError,
            "`plot` needs steps to be an int or a non-empty 1-D array of int steps. "
            "Received: steps=array([0. , 0.5, 1. ]).",
        ),
        (
            lambda: plot([WSD, 0.1], 10),
            TypeError,
            "`plot` needs schedules: functions step -> value. Received: schedule 1 = 0.1.",
        ),
    ],
)
def test_errors(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(
        ImportError,
        match=re.escape(
            "`optx.schedules.plot` needs matplotlib, which is not installed. "
            "Install it with `pip install matplotlib`."
        ),
    ):
        plot(WSD, 10)
