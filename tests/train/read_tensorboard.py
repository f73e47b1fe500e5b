#!/usr/bin/env python3
"""Reads the event file written by loom's SummaryWriter with the tensorboard package (PyPI).

  python3 read_tensorboard.py <path to tensorboard_tool>

The tool writes known scalar series (see tensorboard_tool.cpp); this script checks the file name,
every record's framing and CRCs (tensorboard's own record reader), the first event's file_version,
and then the tags, steps, values and wall times through EventAccumulator.
"""
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

EXPECTED = {
    "train/loss": [(s, 1.0 / (s + 1)) for s in range(10)],
    "test/accuracy": [(e, 0.8 + 0.05 * e) for e in range(1, 4)],
    "lr": [(0, 1e-3), (1 << 40, 5e-4)],
    "throughput/samples_per_sec": [(7, 12345.0)],
}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_records(path):
    reader = PyRecordReader_New(path)  # checks the length and data CRCs of every record
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return events
        e = event_pb2.Event()
        e.ParseFromString(reader.record())
        events.append(e)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(64)
    with tempfile.TemporaryDirectory() as log_dir:
        out = subprocess.run([sys.argv[1], "write", log_dir], check=True, capture_output=True, text=True)
        path = out.stdout.strip()
        files = os.listdir(log_dir)
        if files != [os.path.basename(path)]:
            fail(f"log dir holds {files}, expected the one file {path}")
        if not files[0].startswith("events.out.tfevents.") or socket.gethostname() not in files[0]:
            fail(f"file name {files[0]}")

        events = read_records(path)
        if events[0].file_version != "brain.Event:2":
            fail(f"first event {events[0]}")
        if len(events) != 1 + sum(len(v) for v in EXPECTED.values()):
            fail(f"{len(events)} events")
        first_loss = events[1]
        if first_loss.wall_time != 1700000000.5 or first_loss.step != 0:
            fail(f"wall_time/step of the first loss event: {first_loss}")

        acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
        acc.Reload()
        tags = sorted(acc.Tags()["scalars"])
        if tags != sorted(EXPECTED):
            fail(f"tags {tags} != {sorted(EXPECTED)}")
        for tag, want in EXPECTED.items():
            got = acc.Scalars(tag)
            if [e.step for e in got] != [s for s, _ in want]:
                fail(f"{tag}: steps {[e.step for e in got]}")
            for e, (_, v) in zip(got, want):
                if np.float32(e.value) != np.float32(v):  # simple_value is a float32
                    fail(f"{tag} step {e.step}: {e.value} != {np.float32(v)}")
        walls = [e.wall_time for e in acc.Scalars("train/loss")]
        if walls != [1700000000.5 + s for s in range(10)]:
            fail(f"train/loss wall times {walls}")
        print(f"ok: {len(events)} events, tags {tags}")


if __name__ == "__main__":
    main()
