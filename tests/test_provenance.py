"""evaluators.provenance.versions: what every recorded number names as its environment."""

import platform

import numpy

from evaluators.provenance import versions


def test_versions_read_distributions_and_modules_and_mark_what_is_missing() -> None:
    v = versions(("numpy", "hydra-core", "no_such_package_xyz"))
    assert v["python"] == platform.python_version()
    assert v["numpy"] == numpy.__version__
    assert v["hydra-core"].startswith("1.3")
    assert v["no_such_package_xyz"] == "absent"
    assert "ptxas" in v
    assert "no_such_package_xyz" not in versions(("no_such_package_xyz",), absent=None)
