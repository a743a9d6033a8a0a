"""both_ends.py: what the scripts that are both a model server and its
clients share (transcriptions.py, embeddings.py): serving their routes on
127.0.0.1 until stdin closes, running their client scenarios, and their
command line (`serve`, or `client URL`).
"""
import asyncio
import json
import sys


async def serve(routes):
    """Serves `routes` ((path, POST handler) pairs) on a free port of
    127.0.0.1, printed first, until stdin closes (the test ends)."""
    from aiohttp import web

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path, handler in routes:
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def run_all(scenarios):
    """Each (name, scenario) run in order: what it returned, or its error."""
    results = {}
    for name, scenario in scenarios:
        try:
            results[name] = scenario()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    return results


def main(doc, routes, scenarios):
    """`serve`: serves `routes`; `client URL`: prints the JSON of
    `scenarios(URL)`; anything else: the usage in `doc`."""
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(serve(routes))
    elif sys.argv[1:2] == ["client"] and len(sys.argv) == 3:
        print(json.dumps(scenarios(sys.argv[2])))
    else:
        sys.exit(doc)
