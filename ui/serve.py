"""`streamlit run app.py`, with Streamlit told up front that app.py defines its pages itself.

Why: a folder named `pages/` next to app.py makes Streamlit treat the very first request after
the server starts as an old-style pages-folder app, so a deep link such as /concurrency?...
opened first shows a "Page not found" dialog before st.navigation takes over (every later
session is fine). Declaring the pages up front removes that. Usage (see the Makefile):

    python -m ui.serve [streamlit run options...]
"""
import os
import sys


def main(argv: list[str] | None = None) -> None:
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.web import cli

    PagesManager.uses_pages_directory = False  # app.py calls st.navigation
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = sys.argv[1:] if argv is None else argv
    sys.argv = ["streamlit", "run", os.path.join(root, "app.py"), *args]
    cli.main()


if __name__ == "__main__":
    main()
