"""The local ROS as ROS users know it: its 2019-09-10 OpenAPI and the console's data, over the emulator.

`stacks.LocalStacks` is the facade (stacks by StackId, ROS's field names, asynchronous operations)
on `crhelper.emulator`, `api.RosApi` the OpenAPI over it and `server.LocalRos` the loopback endpoint
serving both the API and the console (`crhelper ros serve`). It sits above `crhelper.emulator` and
`crhelper.local`, which it uses (tests/test_layering.py: local endpoints never import the emulator).
"""
