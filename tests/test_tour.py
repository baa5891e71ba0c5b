"""`make demo` runs examples/tour.py: keep it working."""

import runpy
from pathlib import Path

TOUR = Path(__file__).resolve().parents[1] / "examples" / "tour.py"


def test_tour_runs_and_reports_every_symmetry(capsys):
    runpy.run_path(str(TOUR), run_name="__main__")
    out = capsys.readouterr().out
    assert "9 symmetries found" in out
    for name in ("norm_scaling[0->1]", "rescaling[1->3]", "GL[5->6]", "translation[6]"):
        assert name in out
    assert "HVPs" in out
    assert "k = 32 samples: approximate" in out
    assert "k =  8 samples: exact" in out
    assert "TinyTransformer:" in out
