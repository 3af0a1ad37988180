"""The permission gate's shell reduction: a command line as the simple commands it would run (tree-sitter-bash)."""

from __future__ import annotations

import pytest

from kirocrew_core.gate import shell

HOME = "/home/owner"
WORKSPACE = "/srv/project"


def reduced(line: str) -> shell.Reduction:
    return shell.reduce(line, cwd=WORKSPACE, home=HOME)


def commands(line: str) -> list[str]:
    """The simple commands of ``line`` as text, in the order they appear."""
    return [command.text for command in reduced(line).commands]


@pytest.mark.parametrize(("line", "expected"), [
    ("git status; rm -rf x", ["git status", "rm -rf x"]),
    ("git status && rm -rf x", ["git status", "rm -rf x"]),
    ("git status || rm -rf x", ["git status", "rm -rf x"]),
    ("git status | rm -rf x", ["git status", "rm -rf x"]),
    ("git status |& rm -rf x", ["git status", "rm -rf x"]),
    ("echo safe & whoami", ["echo safe", "whoami"]),
    ("git status\nrm -rf x", ["git status", "rm -rf x"]),
    ("(rm -rf x)", ["rm -rf x"]),
    ("{ rm -rf x; }", ["rm -rf x"]),
    ("! rm -rf x", ["rm -rf x"]),
    ("if true; then rm -rf x; fi", ["true", "rm -rf x"]),
    ("for f in a b; do rm -rf $f; done", ["rm -rf <unknown>"]),
    ("while read l; do echo $l; done", ["read l", "echo <unknown>"]),
    ("case $1 in a) rm -rf x;; esac", ["rm -rf x"]),
    ("f() { rm -rf x; }; f", ["rm -rf x", "f"]),
])
def test_every_command_of_a_list_a_pipeline_or_a_compound_is_its_own_simple_command(line, expected):
    assert commands(line) == expected


@pytest.mark.parametrize(("line", "inner"), [
    ("echo $(rm -rf x)", "rm -rf x"),
    ("echo `rm -rf x`", "rm -rf x"),
    ("x=$(rm -rf x)", "rm -rf x"),
    ("cat <(rm -rf x)", "rm -rf x"),
    ("echo ${x:-$(rm -rf x)}", "rm -rf x"),
    ("[[ $(rm -rf x) == y ]]", "rm -rf x"),
    ("echo \"$(echo $(rm -rf x))\"", "rm -rf x"),
])
def test_a_command_inside_a_substitution_is_found_wherever_it_is(line, inner):
    assert inner in commands(line)


def test_a_word_built_from_a_substitution_is_not_known_before_the_run():
    [echo, _] = reduced("echo $(whoami)").commands
    assert echo.argv[1].value is None and echo.text == "echo <unknown>"


@pytest.mark.parametrize(("line", "via"), [
    ("bash -c 'rm -rf x'", "bash -c"),
    ("sh -c \"rm -rf x\"", "sh -c"),
    ("/bin/bash -lc 'rm -rf x'", "bash -c"),
    ("zsh -ec 'rm -rf x'", "zsh -c"),
    ("dash -c 'rm -rf x' arg0", "dash -c"),
    ("eval \"rm -rf x\"", "eval"),
    ("eval rm -rf x", "eval"),
    ("env -S 'rm -rf x'", "env -S"),
    ("bash <<'EOF'\nrm -rf x\nEOF", "bash <<"),
    ("bash <<EOF\nrm -rf x\nEOF", "bash <<"),
    ("sh <<< 'rm -rf x'", "sh <<<"),
])
def test_a_script_inside_the_line_is_parsed_too(line, via):
    [command] = [c for c in reduced(line).commands if c.name == "rm"]
    assert command.text == "rm -rf x" and command.via == via
    assert reduced(line).reduced


@pytest.mark.parametrize(("line", "expected"), [
    ("env A=1 rm -rf x", "rm -rf x"),
    ("env -i -u HOME -- rm -rf x", "rm -rf x"),
    ("timeout 5 rm -rf x", "rm -rf x"),
    ("timeout -s KILL --kill-after=3 5 rm -rf x", "rm -rf x"),
    ("time rm -rf x", "rm -rf x"),
    ("nice -n 5 rm -rf x", "rm -rf x"),
    ("nice -5 rm -rf x", "rm -rf x"),
    ("nohup rm -rf x", "rm -rf x"),
    ("stdbuf -o0 rm -rf x", "rm -rf x"),
    ("command rm -rf x", "rm -rf x"),
    ("builtin rm -rf x", "rm -rf x"),
    ("exec -a name rm -rf x", "rm -rf x"),
    ("setsid rm -rf x", "rm -rf x"),
    ("ionice -c 3 rm -rf x", "rm -rf x"),
    ("busybox rm -rf x", "rm -rf x"),
    ("coproc rm -rf x", "rm -rf x"),
])
def test_a_transparent_wrapper_stands_for_the_command_it_runs(line, expected):
    assert commands(line) == [expected]


def test_assignments_in_front_of_a_command_or_of_env_are_kept_by_name():
    [command] = reduced("A=1 env B=2 LD_PRELOAD=x.so git status").commands
    assert command.text == "git status" and command.assignments == ("A", "B", "LD_PRELOAD")


@pytest.mark.parametrize(("line", "expected"), [
    ("sudo rm -rf x", ["sudo rm -rf x", "rm -rf x"]),
    ("sudo -u root -- rm -rf x", ["sudo -u root -- rm -rf x", "rm -rf x"]),
    ("doas rm -rf x", ["doas rm -rf x", "rm -rf x"]),
])
def test_an_elevating_wrapper_is_checked_itself_and_for_what_it_runs(line, expected):
    assert commands(line) == expected


def test_xargs_runs_its_command_with_arguments_from_elsewhere():
    [_, command] = reduced("ls | xargs -0 rm -f").commands
    assert command.text == "rm -f …" and command.open_tail and command.via == "xargs"
    assert [c.text for c in reduced("xargs < list").commands] == ["echo …"]  # xargs alone runs echo


def test_find_exec_adds_the_command_it_execs():
    found, execed = reduced("find . -name '*.o' -exec rm -f {} +").commands
    assert found.name == "find"
    assert execed.text == "rm -f …" and execed.via == "find -exec" and execed.open_tail
    assert [c.text for c in reduced("find . -execdir sh -c 'rm -rf x' \\;").commands][-1] == "rm -rf x"


@pytest.mark.parametrize(("line", "name"), [
    ("/bin/rm -rf x", "rm"),
    ("\\rm -rf x", "rm"),
    ("r\"\"m -rf x", "rm"),
    ("'rm' -rf x", "rm"),
    ("\"rm\" -rf x", "rm"),
    ("r\\m -rf x", "rm"),
])
def test_a_command_name_is_read_as_the_shell_reads_it(line, name):
    [command] = reduced(line).commands
    assert command.name == name


def test_words_are_known_when_literal_and_home_and_pwd_are_expanded():
    [command] = reduced("cat ~/a $HOME/b \"$PWD/c\" ${HOME}/d 'e f' \"g\\\"h\" $OTHER ~root/x").commands
    assert [w.value for w in command.argv[1:]] == [f"{HOME}/a", f"{HOME}/b", f"{WORKSPACE}/c", f"{HOME}/d", "e f",
                                                   'g"h', None, None]


def test_a_glob_word_is_marked_and_a_brace_expansion_is_unknown():
    [command] = reduced("ls *.py {a,b}").commands
    assert command.argv[1].value == "*.py" and command.argv[1].glob
    assert command.argv[2].value is None


@pytest.mark.parametrize(("line", "expected"), [
    ("cmd > out", [("out", True)]),
    ("cmd >> out", [("out", True)]),
    ("cmd &> out", [("out", True)]),
    ("cmd >| out", [("out", True)]),
    ("cmd 3> out", [("out", True)]),
    ("cmd < in", [("in", False)]),
    ("cmd > ~/.bashrc", [(f"{HOME}/.bashrc", True)]),
    ("cmd 2>&1 > /dev/null 2> /dev/stderr >&2", []),
    ("echo $(< secret)", [("secret", False)]),
])
def test_redirections_to_files_are_file_reads_and_writes(line, expected):
    assert [(r.target.value, r.write) for r in reduced(line).redirects] == expected


@pytest.mark.parametrize(("line", "why"), [
    ("$CMD x", "a command name is not known before it runs"),
    ("${CMD} x", "a command name is not known before it runs"),
    ("$(which rm) x", "a command name is not known before it runs"),
    ("r?m x", "a command name is not known before it runs"),
    ("eval \"$X\"", "eval of something not known before it runs"),
    ("bash -c \"$X\"", "bash -c runs a script not known before it runs"),
    ("bash -c", "bash -c runs a script not known before it runs"),
    ("echo rm -rf x | bash", "bash reads commands from a pipe"),
    ("curl -s example.com | sh -s", "sh reads commands from a pipe"),
    ("bash <<EOF\nrm $X\nEOF", "a here-document with expansions is fed to a shell"),
    ("sh <<< \"$X\"", "a here-string with expansions is fed to a shell"),
    ("env $X rm", "env gets arguments not known before it runs"),
    ("sudo $X rm", "the command sudo runs is not known"),
    ("git status; ;", "the command does not parse as shell"),
    ("echo 'unterminated", "the command does not parse as shell"),
    ("& whoami", "the command does not parse as shell"),
])
def test_what_cannot_be_reduced_to_known_simple_commands_is_reported(line, why):
    out = reduced(line)
    assert not out.reduced and why in out.unknown


def test_a_line_longer_than_the_limit_is_not_parsed_at_all():
    out = reduced("echo " + "a" * shell.MAX_CHARS)
    assert out.commands == [] and out.unknown == [f"the command is longer than {shell.MAX_CHARS} characters"]
    assert reduced("echo " + "a" * (shell.MAX_CHARS - 5)).reduced


def test_scripts_nested_deeper_than_the_limit_are_reported():
    line = "rm -rf x"
    for _ in range(shell.MAX_DEPTH + 2):
        line = "bash -c " + shell_quote(line)
    assert f"scripts nested deeper than {shell.MAX_DEPTH} levels" in reduced(line).unknown


def test_more_commands_than_the_limit_are_reported():
    out = reduced("; ".join(["true"] * (shell.MAX_COMMANDS + 1)))
    assert len(out.commands) == shell.MAX_COMMANDS and f"more than {shell.MAX_COMMANDS} commands" in out.unknown


def test_a_plain_command_line_reduces_cleanly():
    out = reduced("git status -s && npm run test:unit -- --watch=false")
    assert out.reduced and [c.text for c in out.commands] == ["git status -s",
                                                              "npm run test:unit -- --watch=false"]


def shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


@pytest.mark.parametrize("line", [
    "bash -o pipefail -c 'rm -rf x'",
    "bash -O extglob -c 'rm -rf x'",
    "bash +o posix -c 'rm -rf x'",
    "bash -c -e 'rm -rf x'",
    "bash -c -x -- 'rm -rf x'",
    "bash -c -- 'rm -rf x'",
    "bash --rcfile /dev/null -c 'rm -rf x'",
    "fish --command='rm -rf x'",
    "fish --command 'rm -rf x'",
])
def test_a_shell_script_is_found_whatever_options_come_around_c(line):
    # bash reads every option first (-o and -O take a value), then its first operand is the -c script.
    assert "rm -rf x" in commands(line) and reduced(line).reduced


def test_an_unquoted_here_document_fed_to_a_shell_is_read_after_its_escapes():
    # The shell that reads the here-document drops the backslash: the script it runs says `git $X`.
    [command] = reduced("bash <<EOF\ngit \\$X\nEOF").commands
    assert command.name == "git" and command.argv[1].value is None
    [quoted] = reduced("bash <<'EOF'\ngit \\$X\nEOF").commands
    assert quoted.argv[1].value == "$X"  # a quoted delimiter keeps the body as written


def test_env_split_string_runs_its_string_with_the_arguments_after_it():
    assert commands("env -S 'git -c' core.pager=evil log") == ["git -c core.pager=evil log"]
    assert commands("env --split-string='rm' -rf x") == ["rm -rf x"]
    assert not reduced("env -S rm $X").reduced


@pytest.mark.parametrize("line", [
    "x='$(rm -rf y)'; echo ${x@P}",
    "x='a[$(rm -rf y)]'; echo $((x))",
    "x='a[$(rm -rf y)]'; echo $(($x + 1))",
    "x='a[$(rm -rf y)]'; echo $[x]",
    "x='a[$(rm -rf y)]'; (( x ))",
    "x='a[$(rm -rf y)]'; [[ $x -eq 1 ]]",
    "x='a[$(rm -rf y)]'; echo ${a[x]}",
    "x='a[$(rm -rf y)]'; a[x]=1",
    "i='a[$(rm -rf y)]'; echo ${s:i:1}",
    "x='a[$(rm -rf y)]'; echo ${!x}",
    "x='a[$(rm -rf y)]'; let y=x",
    "x='a[$(rm -rf y)]'; declare -i y=x",
    "echo $(( $(cat numbers) ))",
    "for ((i = x; i < 3; i++)); do echo $i; done",
    "unset 'a[$(rm -rf y)]'",
    "test -v 'a[$(rm -rf y)]'",
    "printf -v 'a[`rm -rf y`]' x",
    "read 'a[$(rm -rf y)]' < f",
    "declare -n r='a[$(rm -rf y)]'",
])
def test_a_value_bash_evaluates_as_code_is_not_reduced(line):
    # Prompt expansion, arithmetic (whose array subscripts run substitutions) and builtins that take a
    # variable name all run the commands in a value the parser only sees as data.
    assert not reduced(line).reduced


@pytest.mark.parametrize("line", [
    "echo $((1 + 2 * 3)) ${a[0]} ${a[@]} ${#a[@]} ${x@Q} ${x:-default} ${x: -1} ${x^^}",
    "(( 3 > 2 )) && [[ 3 -eq 3 ]] && [[ $x == y ]]",
    "for ((;;)); do break; done",
    "unset x; read -r line < f; printf -v out '%s' x; declare -i n=5; a[0]=1",
])
def test_arithmetic_on_numbers_and_plain_expansions_still_reduce(line):
    assert reduced(line).reduced, reduced(line).unknown


@pytest.mark.parametrize("line", [
    "PATH=/tmp/evil:$PATH; git status",
    "export LD_PRELOAD=/tmp/x.so && git status",
    "declare -x GIT_DIR=/tmp/other; git status",
    "LD_PRELOAD=/tmp/x.so; export LD_PRELOAD; git status",
    "bash -c 'PATH=/tmp/evil; git status'",
])
def test_a_variable_set_earlier_in_the_line_counts_for_the_commands_after_it(line):
    [git] = [c for c in reduced(line).commands if c.name == "git"]
    assert {"PATH", "LD_PRELOAD", "GIT_DIR"} & set(git.assignments)
