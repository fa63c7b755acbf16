from forge.cli.main import run

run()
