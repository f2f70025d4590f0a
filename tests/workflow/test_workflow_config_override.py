"""The DAG's own overrides: `snakemake --config set=KEY=VALUE` takes the dotted keys of `fp8rl --set`
(Snakemake refuses a dotted name in `--config` itself), and a wrong key or value stops the DAG with
exit 2 and a message naming the entry, without a traceback."""

from __future__ import annotations

import re

from workflow_helpers import REPO, snakemake

CI = str(REPO / "config" / "ci.yaml")


def _config_files(out: str) -> set[str]:
    """The resolved config files the planned commands read (`--config {R}/config/{digest}.yaml`)."""
    return set(re.findall(r"--config (\S+/config/\w+\.yaml)", out))


def test_a_set_entry_reaches_the_jobs_config(tmp_path):
    plain = snakemake(tmp_path, "-n", "-p", "--configfile", CI).stdout
    limited = snakemake(tmp_path, "-n", "-p", "--configfile", CI, "--config", "set=eval.limit=20").stdout
    mapped = snakemake(tmp_path, "-n", "-p", "--configfile", CI, "--config", "eval={limit: 20}").stdout
    assert len(_config_files(plain)) == len(_config_files(limited)) == 1
    assert _config_files(plain) != _config_files(limited) == _config_files(mapped)


def test_a_bad_entry_stops_the_dag_naming_it(tmp_path):
    for entry, named in [
        ("set=eval.limt=20", "--config eval.limt=20: eval.limt: unknown key"),
        ("set=eval.limit=0", "--config eval.limit=0: eval.limit:"),
        ("set=20", "set=20: expected KEY=VALUE overrides"),
    ]:
        proc = snakemake(tmp_path, "-n", "--configfile", CI, "--config", entry, check=False)
        assert proc.returncode == 2, proc.stderr
        assert named in proc.stderr and "Traceback" not in proc.stderr
