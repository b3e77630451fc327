"""How `sluice` subcommands are declared and built (operators/cli/common.py add_command)."""

from __future__ import annotations

import argparse

import pytest

from operators.cli import common, main, pools, simulate


def test_cluster_commands_take_the_shared_flags_local_ones_do_not() -> None:
    parser = main.build_parser()
    args = parser.parse_args(["pools", "--context", "dev", "-o", "json"])
    assert (args.run, args.context, args.output) == (pools.run, "dev", "json")
    local = parser.parse_args(["simulate", "--nodes", "lingjun", "--jobs", "j.csv"])
    assert local.run_local is simulate.run
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--nodes", "n", "--jobs", "j", "--context", "dev"])


def test_a_command_needs_exactly_one_way_to_run() -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    shared = common.shared_flags()
    with pytest.raises(ValueError, match="exactly one"):
        common.add_command(sub, shared, common.Command("x", "h", "d"))
    with pytest.raises(ValueError, match="exactly one"):
        common.add_command(
            sub, shared, common.Command("y", "h", "d", run=pools.run, run_local=simulate.run)
        )


@pytest.mark.parametrize("command", ["pools", "queues", "why", "top"])
def test_every_cluster_command_explains_itself_and_its_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main.build_parser().parse_args([command, "--help"])
    text = capsys.readouterr().out
    for flag in ("--kubeconfig", "--context", "-o {table,json}"):
        assert flag in text, (command, flag)
    description = text.split("\n\n")[1]
    assert len(description.split()) >= 5, (command, description)
