"""The project's own error type.

Every bad input that reaches `mla_core` (a malformed `config.json`, a negative context, an
unknown preset, a KV dtype that does not fit the model) raises `MLAError` with a one-line
message that says what was wrong and what would be accepted. The command line turns it into
exit status 2; the app turns it into `st.error`. Anything else escaping is a bug.
"""


class MLAError(ValueError):
    """Bad input to the analytic core: the message is one line, fit to show a user."""

    def __init__(self, message: str):
        # One line, bounded: a hostile value must not turn an error into a wall of text.
        text = " ".join(str(message).split())
        if len(text) > 400:
            text = text[:397] + "..."
        super().__init__(text)


class ConfigError(MLAError):
    """A `config.json` (file or dict) that cannot be read as a model."""
