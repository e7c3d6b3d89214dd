"""Every subcommand's --help says what it does: a description between the usage line and the options."""
import pytest

from dpstream.pipelines.cli import main as cli

COMMANDS = [[], ["run"], ["status"], ["validate"], ["demo"], ["account"], ["budget"], ["budget", "init"], ["budget", "show"],
            ["budget", "spend"], ["budget", "history"], ["budget", "release"], ["budget", "retire"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "dpstream")
def test_help_has_a_description(command, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    description = text.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")) and len(description.split()) >= 8, text
