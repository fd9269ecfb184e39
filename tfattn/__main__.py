"""`python -m tfattn`: the `tfattn` command (`tfattn.cli`), for an environment whose scripts folder
is not on PATH (a notebook's `!python -m tfattn translate ...`, a virtual environment not activated)."""

from tfattn.cli import run

if __name__ == "__main__":
    run()
