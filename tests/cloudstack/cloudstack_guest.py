"""A VM's guest for the tests: listens on $VM_IP:<port> (argv[1]) and keeps a child, so a stop that
misses the process group leaves an orphan the test sees."""

import os
import socket
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
# The marker is whole before the port opens: a test that waited for the port reads it at once.
with open(sys.argv[2] + ".part", "w") as out:
    out.write(f"{os.environ['VM_ID']} {os.environ['HOST']} {child.pid}\n")
os.replace(sys.argv[2] + ".part", sys.argv[2])
server = socket.create_server((os.environ["VM_IP"], int(sys.argv[1])))
while True:
    conn, _ = server.accept()
    conn.close()
