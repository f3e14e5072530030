#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for loom's tests.

It parses the TFRecord framing (length, masked CRC-32C of the length,
payload, masked CRC-32C of the payload) and decodes the Event / Summary
protobuf messages from the wire format by hand, with TensorFlow's field
numbers: no TensorFlow, no protobuf library, nothing of loom's code.

  read_tfevents.py FILE            prints {"records", "complete", "file_version",
                                   "scalars": [[step, tag, value]], "texts": [[tag, text]]}
  read_tfevents.py --compare RUN   checks that RUN/tb/ holds exactly one scalar per
                                   number of every line of RUN/metrics.jsonl (tags by
                                   loom's documented rule, values as float32); exit 1
                                   with the differences otherwise.

A record cut short at the end of a file (a writer killed mid-write) ends the
reading: "complete" is false. A CRC mismatch anywhere is an error (exit 2).
"""

import glob
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The payloads of every complete record, and whether the file ended cleanly."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos < len(data):
        if pos + 12 > len(data):
            return out, False
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc(header) != length_crc:
            raise ValueError("%s: bad length CRC at byte %d" % (path, pos))
        end = pos + 12 + length + 4
        if end > len(data):
            return out, False
        payload = data[pos + 12:pos + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4:end])
        if masked_crc(payload) != payload_crc:
            raise ValueError("%s: bad payload CRC at byte %d" % (path, pos))
        out.append(payload)
        pos = end
    return out, True


def varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data):
    """(field number, wire type, value) of every field of a message."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield number, wire, value


def decode_event(payload):
    event = {"step": 0, "values": []}
    for number, _, value in fields(payload):
        if number == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            event["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3:
            event["file_version"] = value.decode()
        elif number == 5:  # Summary
            for summary_field, _, summary_value in fields(value):
                if summary_field == 1:  # Summary.Value
                    event["values"].append(decode_value(summary_value))
    return event


def decode_value(data):
    value = {}
    for number, _, field in fields(data):
        if number == 1:
            value["tag"] = field.decode()
        elif number == 2:
            value["simple_value"] = struct.unpack("<f", field)[0]
        elif number == 8:  # TensorProto: string_val = 8
            value["text"] = [v.decode() for n, _, v in fields(field) if n == 8]
        elif number == 9:  # SummaryMetadata.plugin_data.plugin_name
            for n, _, plugin in fields(field):
                if n == 1:
                    value["plugin"] = [p.decode() for m, _, p in fields(plugin) if m == 1][0]
    return value


def read(path):
    payloads, complete = records(path)
    result = {"records": len(payloads), "complete": complete, "scalars": [], "texts": []}
    for payload in payloads:
        event = decode_event(payload)
        if "file_version" in event:
            result["file_version"] = event["file_version"]
        for value in event["values"]:
            if "simple_value" in value:
                result["scalars"].append([event["step"], value["tag"], value["simple_value"]])
            elif "text" in value:
                result["texts"].append([value["tag"], value["text"][0], value.get("plugin")])
    return result


def expected_scalars(line):
    """loom's tag rule, written out again: every number of a metrics line."""
    prefix = line.get("stage", "run")
    if isinstance(line.get("event"), str):
        prefix += "/" + line["event"]
    if isinstance(line.get("teacher"), str):
        prefix += "/" + line["teacher"]
    step = line.get("version", line.get("step", 0))
    out = []

    def walk(value, tag):
        if isinstance(value, bool) or isinstance(value, str) or value is None:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, tag + "/" + key)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, tag + "/" + str(i))
        else:
            out.append([step, tag, struct.unpack("<f", struct.pack("<f", float(value)))[0]])

    for key, value in line.items():
        walk(value, prefix + "/" + key)
    return out


def compare(run_dir):
    got = []
    for path in sorted(glob.glob(run_dir + "/tb/events.out.tfevents.*")):
        got += read(path)["scalars"]
    want = []
    with open(run_dir + "/metrics.jsonl") as f:
        for line in f:
            want += expected_scalars(json.loads(line))
    key = lambda s: (s[0], s[1], s[2])
    missing = [s for s in want if s not in got]
    extra = [s for s in got if s not in want]
    print(json.dumps({"tb_scalars": len(got), "metrics_numbers": len(want),
                      "missing": missing[:10], "extra": extra[:10]}))
    return 0 if sorted(got, key=key) == sorted(want, key=key) and want else 1


def main():
    try:
        if len(sys.argv) == 3 and sys.argv[1] == "--compare":
            return compare(sys.argv[2])
        print(json.dumps(read(sys.argv[1])))
        return 0
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
