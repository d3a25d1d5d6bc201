"""The small rules of mla_core.views that the pages' charts and tables follow (hand-computed cases)."""
import shlex

from mla_core.views import command_lines, legend_name, same_as


def test_same_as_names_the_first_line_a_later_one_sits_on():
    lines = [("a", (1, 2, 3)), ("b", (1, 2, 3)), ("c", (100, 200, 300.0)), ("d", (102, 205, 302)), ("e", (1, 2, 4))]
    same = same_as(lines)
    assert same == {"b": ("a", True), "d": ("c", False)}  # d is 2.5% off c at most; e is 33% off a at its end
    assert legend_name("b", same) == "b (same as a)" and legend_name("d", same) == "d (within 3% of c)"
    assert legend_name("e", same) == "e"
    assert same_as([("x", (None, 5)), ("y", (None, 5)), ("z", (0, 5))]) == {"y": ("x", True)}  # None is not 0
    assert same_as([("p", ((1.0, 2.0), (3.0, 4.0))), ("q", ((1.0, 2.0), (3.0, 4.0)))]) == {"q": ("p", True)}


def test_a_command_goes_one_flag_a_line_and_pastes_as_the_same_words():
    cmd = shlex.join(["vllm", "serve", "org/model", "--tensor-parallel-size", "8", "--speculative-config",
                      '{"method": "mtp", "num_speculative_tokens": 1}', "--trust-remote-code"])
    text = command_lines(cmd)
    assert text.splitlines() == ["vllm serve org/model \\", "  --tensor-parallel-size 8 \\",
                                 "  --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}' \\",
                                 "  --trust-remote-code"]
    assert shlex.split(text.replace("\\\n", "")) == shlex.split(cmd)
    assert command_lines(None) is None
