"""A VM's guest for the tests: listens on $VM_IP:<port> (argv[1]) and keeps a child, so a stop that
misses the process group leaves an orphan the test sees."""

import os
import socket
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
server = socket.create_server((os.environ["VM_IP"], int(sys.argv[1])))
with open(sys.argv[2], "w") as out:
    out.write(f"{os.environ['VM_ID']} {os.environ['HOST']} {child.pid}\n")
while True:
    conn, _ = server.accept()
    conn.close()
