"""A Pygments lexer for Flow, registered as the `flow` lexer (entry point `pygments.lexers`).

    pygmentize -l flow examples/support/main.flow
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, include, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace


class FlowLexer(RegexLexer):
    name = "Flow"
    aliases = ["flow"]
    filenames = ["*.flow"]
    mimetypes = ["text/x-flow"]

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"///[^\n]*", String.Doc),
            (r"//[^\n]*", Comment.Single),
            (r"@[a-z_][A-Za-z0-9_]*", Name.Decorator),
            (words(("use", "as", "pub", "type", "flow", "let", "guard", "else", "if", "match", "return"),
                   suffix=r"\b"), Keyword),
            (words(("true", "false"), suffix=r"\b"), Keyword.Constant),
            (r"!(tool|[a-z][A-Za-z0-9_]*)\b", Keyword.Pseudo),
            (r'"', String.Double, "text"),
            (r"[0-9][0-9_]*(\.[0-9][0-9_]*)?(ns|us|ms|s|m|h|d)\b", Number.Other),
            (r"[0-9][0-9_]*\.[0-9][0-9_]*", Number.Float),
            (r"[0-9][0-9_]*", Number.Integer),
            (r"([a-z][A-Za-z0-9_]*)(\.)([A-Z][A-Za-z0-9_]*)", bygroups(Name.Namespace, Punctuation, Name.Class)),
            (r"[A-Z][A-Za-z0-9_]*", Name.Class),
            (r"[a-z_][A-Za-z0-9_]*", Name),
            (r"=>|->|\+\+|==|!=|<=|>=|&&|\|\||\.\.|[-+*/%<>=!?|]", Operator),
            (r"[(){}\[\],.:]", Punctuation),
        ],
        "text": [
            (r'\\(u\{[0-9A-Fa-f]{1,6}\}|[ntr0\\"$])', String.Escape),
            (r"\$\{", String.Interpol, "interpolation"),
            (r'"', String.Double, "#pop"),
            (r'[^"\\$\n]+', String.Double),
            (r"\$", String.Double),
            (r"\\.", String.Double),
        ],
        "interpolation": [
            (r"\}", String.Interpol, "#pop"),
            include("root"),
        ],
    }


__all__ = ["FlowLexer", "Text"]
