"""scripts/check_reproduced.sh, which .ci/run, the Slurm CI and the image rehearsal use to decide whether a
machine reproduced a published tier: tables compared byte for byte, and a publication from the machine's
own CPU vendor preferred where the named one was published on the other vendor's (the pinned kernel path
holds within a vendor, not across: docs/numerics.md). The publications are copies of the shipped CI
publication; `CPUINFO` stands in for /proc/cpuinfo."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_reproduced.sh"
VENDORS = {"intel": ("GenuineIntel", "Intel(R) Xeon(R) Processor"), "amd": ("AuthenticAMD", "AMD EPYC")}


def publication(dest: Path, vendor: str, final_loss: str) -> Path:
    """The shipped CI publication, as if published on `vendor`'s CPU with the base's final SFT loss given."""
    shutil.copytree(REPO / "results" / "published" / "ci", dest)
    prov = json.loads((dest / "provenance.json").read_text())
    prov["numerics"]["cpu"]["model"] = VENDORS[vendor][1]
    (dest / "provenance.json").write_text(json.dumps(prov, indent=2))
    table = dest / "tables" / "base_models.csv"
    head, row = table.read_text().splitlines()
    cells = row.split(",")
    cells[head.split(",").index("loss/final")] = final_loss
    table.write_text(f"{head}\n{','.join(cells)}\n")
    return dest


def check(tmp_path: Path, vendor: str, published: Path, results: Path) -> subprocess.CompletedProcess:
    cpuinfo = tmp_path / f"cpuinfo_{vendor}"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {VENDORS[vendor][0]}\n")
    return subprocess.run(
        ["bash", str(SCRIPT), str(published), str(results)],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "CPUINFO": str(cpuinfo)},
    )  # fmt: skip


@pytest.fixture
def tiers(tmp_path):
    published = publication(tmp_path / "published" / "ci", "intel", "1.0414")
    publication(tmp_path / "published" / "ci_amd", "amd", "1.09665")
    fresh_amd = publication(tmp_path / "results" / "smoke", "amd", "1.09665")
    return published, fresh_amd


def test_a_machine_of_the_other_vendor_compares_with_its_own_vendors_publication(tmp_path, tiers):
    published, fresh_amd = tiers
    proc = check(tmp_path, "amd", published, fresh_amd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"comparing with {published}_amd" in proc.stdout and "reproduced:" in proc.stdout


def test_a_machine_of_the_publishing_vendor_compares_with_the_named_publication(tmp_path, tiers):
    published, fresh_amd = tiers
    proc = check(tmp_path, "intel", published, fresh_amd)  # AMD tables on an "Intel" machine: they differ
    assert proc.returncode == 1
    assert "comparing with" not in proc.stdout
    assert "-tiny,,1234,200,1.0414," in proc.stdout and "+tiny,,1234,200,1.09665," in proc.stdout


def test_without_a_publication_of_this_vendor_it_says_so_and_compares_anyway(tmp_path, tiers):
    published, fresh_amd = tiers
    shutil.rmtree(Path(f"{published}_amd"))
    proc = check(tmp_path, "amd", published, fresh_amd)
    assert proc.returncode == 1
    assert f"no {published}_amd stands beside it" in proc.stderr
    assert "not reproduced:" in proc.stderr
