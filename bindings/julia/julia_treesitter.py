# SPDX-License-Identifier: Apache-2.0
"""Julia syntax through tree-sitter-julia, a maintained grammar from PyPI.

Every .jl file and every README Julia example must parse with no ERROR or MISSING node:
tree-sitter recovers from a syntax error by inserting one of those, so their absence means
the text is Julia the grammar accepts. This is the checker's syntax gate; julia_forms.py then
reads the forms the ABI checks need (@ccall sites, struct fields, constants) from the same
tree.

Needs `tree-sitter` and `tree-sitter-julia` (pinned below; tools/dev.sh installs them).
"""

from __future__ import annotations

from typing import List, Tuple

TREE_SITTER_VERSION = "0.26.1"
TREE_SITTER_JULIA_VERSION = "0.23.1"
INSTALL = f"python3 -m pip install tree-sitter=={TREE_SITTER_VERSION} tree-sitter-julia=={TREE_SITTER_JULIA_VERSION}"

_parser = None


def parser():
    """The tree-sitter parser for Julia; SystemExit with the install command when missing."""
    global _parser
    if _parser is None:
        try:
            import tree_sitter
            import tree_sitter_julia
        except ImportError as error:
            raise SystemExit(f"check_julia: {error}; install the Julia grammar with: {INSTALL}") from None
        _parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_julia.language()))
    return _parser


# Keywords that open a block closed by `end`; one left bare in an ERROR node was never closed.
BLOCK_KEYWORDS = {
    "function",
    "macro",
    "module",
    "baremodule",
    "struct",
    "if",
    "for",
    "while",
    "let",
    "begin",
    "try",
    "do",
    "quote",
}


def syntax_errors(text: str) -> List[Tuple[int, str]]:
    """(1-based line, message) for every ERROR or MISSING node of the parse, outermost first."""
    return parse(text)[1]


def parse(text: str):
    """(root node, syntax errors): the errors as syntax_errors() gives them."""
    tree = parser().parse(text.encode("utf-8"))
    lines = text.splitlines()
    found: List[Tuple[int, str]] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_missing or node.is_error:
            row, column = node.start_point
            end = node.end_point[0]
            # The first line of the node that is code (an ERROR node may start at a comment).
            code = next(
                (
                    lines[r].strip()
                    for r in range(row, min(end + 1, len(lines)))
                    if lines[r].strip() and not lines[r].lstrip().startswith("#")
                ),
                "",
            )
            if node.is_missing:
                what = f"missing {node.type} at column {column + 1}"
            else:
                what = "syntax error" + (f" in lines {row + 1}-{end + 1}" if end > row else f" at column {column + 1}")
            found.append((row + 1, f"{what} (tree-sitter-julia): {code[:80]}"))
            if node.is_error:
                for child in node.children:
                    if not child.is_named and child.type in BLOCK_KEYWORDS:
                        found.append(
                            (
                                child.start_point[0] + 1,
                                f"`{child.type}` is never closed by `end` (tree-sitter-julia): "
                                f"{lines[child.start_point[0]].strip()[:80]}",
                            )
                        )
            continue  # the children of an ERROR node only repeat it
        stack.extend(reversed(node.children))
    return tree.root_node, sorted(found)
