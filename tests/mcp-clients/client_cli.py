"""The command line the Python client scripts share: `SCRIPT URL COMMAND
[TOOL [JSON-ARGUMENTS]]`, and one JSON document on stdout, whatever happens
(a failure is `{error: {message}}`, so a test reads it as data)."""
import asyncio
import json
import sys


def run(main) -> None:
    """Runs `main(url, command, tool, arguments)` and prints what it returns."""
    url, command, *rest = sys.argv[1:]
    tool = rest[0] if rest else None
    arguments = rest[1] if len(rest) > 1 else None
    try:
        output = asyncio.run(main(url, command, tool, arguments))
    except BaseException as error:  # noqa: BLE001 - every failure is reported as data
        while isinstance(error, BaseExceptionGroup) and error.exceptions:
            error = error.exceptions[0]
        output = {"error": {"message": f"{type(error).__name__}: {error}"}}
    print(json.dumps(output))
