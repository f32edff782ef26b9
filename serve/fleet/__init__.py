"""`oxygen-gym serve --ray`: the policy server as Ray Serve replicas, each with its own engine, slot pool and batch
loop (serve/server.py, unchanged inside); a robot's websocket stays on the replica that accepted it, and Ray Serve's
router sends each new robot to the replica with the most free seats (router.py). A replica that dies or outstays its
drain leaves its robots a 1012 close from Serve's proxy (proxy_close.py). docs/serve.md, "A fleet on Ray".
"""
