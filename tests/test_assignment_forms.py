"""Inside the search a joint assignment has one form, ``Assignment``: Optuna's parameters
are read and written at the space's boundary, a worker process receives plain names and
reads them back on its own load of the file, and the sampler's coordinates stay in the
two modules that speak them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tuner.bundled import problem_file
from tuner.errors import AssignmentError
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment
from tuner.search.baselines import PER_BUCKET
from tuner.search.space import JointSpace

SEARCH = Path(__file__).resolve().parents[1] / "tuner" / "search"


@pytest.fixture(scope="module")
def decode():
    return load_problem(problem_file("llm_decode"))


def test_a_worker_reads_back_the_assignment_it_was_sent(decode):
    """The names codec round-trips on another load of the same file: equal configs, cell by cell."""
    space = JointSpace.of(decode)
    elsewhere = load_problem(problem_file("llm_decode"))  # what a worker process loads
    for assignment in (Assignment.default(decode), PER_BUCKET.assignment(space)):
        names = assignment.names()
        back = Assignment.named(elsewhere, names)
        assert back == assignment and back.names() == names
        assert all(mine.params == theirs.params for (_, mine), (_, theirs) in zip(assignment.cells(), back.cells()))


def test_a_name_the_problem_lacks_is_one_line_naming_the_file(decode):
    op, configs = Assignment.default(decode).names()[0]
    with pytest.raises(AssignmentError) as caught:
        Assignment.named(decode, ((op, ("no_such_config",) * len(configs)),))
    assert str(decode.path) in str(caught.value) and "no_such_config" in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(AssignmentError, match="no operator named"):
        Assignment.named(decode, (("no_such_op", ("x",)),))


def test_optuna_params_are_read_and_written_at_the_space(decode):
    """``params_of`` then ``key`` gives the assignment back (the same value, and the same
    object for the same point: the search's maps key on it), with the knob values."""
    space = JointSpace.of(decode)
    baseline = PER_BUCKET.assignment(space)
    params = {**space.params_of(baseline), **space.axis.params(space.axis.defaults)}
    found = space.key(params)
    assert found is not None and found == (baseline, space.axis.defaults)
    again = space.key(dict(params))
    assert again is not None and again[0] is found[0]
    assert space.key({**params, space.names[space.free[0]]: "no_such_config"}) is None


def test_the_samplers_coordinates_stay_in_the_space_and_the_sampler():
    """No other module of the search names a point (``JointPoint``) or reads one from
    Optuna's params (``point(``, ``point_key(``)."""
    speaking = set()
    for path in sorted(SEARCH.glob("*.py")):
        tree = ast.parse(path.read_text())
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        names |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
        if names & {"JointPoint", "point", "point_key", "point_of"}:
            speaking.add(path.name)
    assert speaking == {"space.py", "local.py"}
