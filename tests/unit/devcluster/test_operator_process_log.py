"""`OperatorProcess.said`: start-up marks found in a log that keeps growing (e2e and bench waits)."""

from __future__ import annotations

from pathlib import Path

from operators.devcluster.operator_process import OperatorProcess


def test_a_mark_stays_found_after_the_log_grows_past_any_tail(tmp_path: Path) -> None:
    proc = OperatorProcess("pool", tmp_path / "kubeconfig", tmp_path)
    assert not proc.said("operator pool started")  # no log yet
    proc.log_path.write_text("importing\noperator pool started (cluster-wide)\n")
    assert proc.said("operator pool started")
    with proc.log_path.open("a") as log:
        log.write("node event\n" * 200_000)
    assert "operator pool started" not in proc.log(100_000)  # what the old wait looked at
    assert proc.said("operator pool started")


def test_a_mark_written_in_two_pieces_between_reads_is_found(tmp_path: Path) -> None:
    proc = OperatorProcess("scheduler", tmp_path / "kubeconfig", tmp_path)
    proc.log_path.write_text("x" * 1000 + "caches syn")
    assert not proc.said("caches synced")
    with proc.log_path.open("a") as log:
        log.write("ced in 0.8s\n")
    assert proc.said("caches synced")
    assert not proc.said("operator jobs started")


def test_a_restarted_process_must_say_its_mark_again(tmp_path: Path) -> None:
    # The previous run's "started" line must not answer a wait for the restart (an operator
    # still importing would be taken for a working one).
    proc = OperatorProcess("no-such-operator", tmp_path / "kubeconfig", tmp_path)
    proc.log_path.write_text("operator events started\n")
    assert proc.said("operator events started")
    proc.start()  # an unknown operator name: the process exits at once with a usage error
    assert proc.proc is not None
    proc.proc.wait(60)
    assert not proc.said("operator events started")
    with proc.log_path.open("a") as log:
        log.write("operator events started\n")
    assert proc.said("operator events started")
