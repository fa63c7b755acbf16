from forge.cli.main import cli

cli(prog_name="forge")
