"""`python -m loaderbench` runs the CLI."""

from loaderbench.cli import main

if __name__ == "__main__":
    main()
