"""The VSphereMachine controller (provider role): realises a VSphereMachine as a vSphere VM through
the ``Backend`` protocol. ``controller`` wires it; ``decide`` is the pure step; ``sources`` feed
the queue (backend VM watches, Provider changes), ``reconnect`` wakes machines when a vCenter
answers again, ``placement`` turns a failure domain into a ``VMSpec``, ``progress`` paces
progress-only status writes, ``writes`` remembers this process's own writes, ``vcenter_slots``
caps the workers one vCenter may hold."""
