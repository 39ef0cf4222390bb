"""One module per `depthattn` subcommand: its arguments (`add_arguments`) and what it does (`run`); cli.py
dispatches."""
