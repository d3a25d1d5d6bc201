"""Showing text a user supplied (a model name from an uploaded config) without it being rendered."""

_MD_SPECIAL = set("\\`*_{}[]()#+-.!|<>~$&")


def escape_md(text: str, limit: int = 120) -> str:
    """Backslash-escape Markdown and HTML-significant characters and cut to `limit` chars, so a
    name like '<script>' or '![x](http://...)' shows as typed inside st.markdown/st.caption."""
    text = str(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = " ".join(text.split())
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text)
