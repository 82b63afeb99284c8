"""Every NTP driver passes its ``device`` to the engine (issue 25.3): a spy on
:func:`attnsvm.train.fit` records the device of each call (and runs it on the CPU), so the test
needs no GPU. Before issue 25, ch15's and ch15b's drivers ran on ``"cpu"`` whatever their
notebooks asked."""
import pytest

import attnsvm.train as train
from attnsvm.experiments import ntp, ntpattn


@pytest.fixture
def spy(monkeypatch):
    seen = []
    real = train.fit

    def fit(data, **kw):
        seen.append(kw.get("device"))
        return real(data, **{**kw, "device": "cpu"})

    monkeypatch.setattr(train, "fit", fit)
    return seen


@pytest.mark.parametrize("run", [
    lambda: ntp.ntp_linear_experiment(3, 6, 5, trials=1, steps=60, steps_fast=20,
                                      device="cuda:0"),
    lambda: ntp.zen_experiment(trials=1, steps=60, steps_fast=20, device="cuda:0"),
    lambda: ntp.ufm_experiment(6, 8, 2, d=10, trials=1, steps=20, device="cuda:0"),
    lambda: ntpattn.ntp_attention_experiment(n=20, K=6, T=4, trials=1, steps=20, n_records=5,
                                             device="cuda:0"),
], ids=["ch15-linear", "ch15b-zen", "ch15b-ufm", "ch16-attention"])
def test_driver_device_reaches_fit(spy, run):
    run()
    assert spy and all(d == "cuda:0" for d in spy), spy
