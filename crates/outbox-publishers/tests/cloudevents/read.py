#!/usr/bin/env python3
"""Reads one captured message with the official CloudEvents SDK for Python
(`pip install 'cloudevents>=2.2,<3'`) and checks its attributes.

Usage: read.py BINDING < message.json

BINDING says which of the SDK's parsers reads the message:

  kafka   cloudevents.core.bindings.kafka.from_kafka (binary or structured)
  http    cloudevents.core.bindings.http.from_http
  nats    the HTTP parser: NATS headers follow the HTTP binding's `ce-` names
  amqp    cloudevents.core.bindings.amqp.from_amqp (`cloudEvents:` headers
          as application properties, the content type as a property)
  redis   the Kafka parser, a stream entry's fields taken as headers and its
          `payload` field as the value (Redis has no CloudEvents binding)
  json    cloudevents.core.formats.json.JSONFormat().read (one structured
          event, as the stdout and file publishers write it)

message.json is an object: "headers" (name to text), "body" (text),
"key" (text or null), "content_type" (text or null), and optionally
"expect" (attribute name to text). It prints the attributes and data the
SDK read, as JSON. With "expect", every attribute must be there with that
value and no other attribute may be: otherwise it names the first
difference and exits 1. A message the SDK refuses exits 2.
"""

import json
import sys

from cloudevents.core.bindings import amqp, http, kafka
from cloudevents.core.formats.json import JSONFormat
from dateutil.parser import isoparse


def read(binding, m):
    body = m.get("body", "").encode("utf-8")
    headers = m.get("headers", {})
    fmt = JSONFormat()
    if binding == "kafka":
        key = m.get("key")
        msg = kafka.KafkaMessage(
            headers={k: v.encode("utf-8") for k, v in headers.items()},
            key=None if key is None else key.encode("utf-8"),
            value=body,
        )
        return kafka.from_kafka(msg, fmt)
    if binding in ("http", "nats"):
        return http.from_http(http.HTTPMessage(headers=headers, body=body), fmt)
    if binding == "amqp":
        props = {}
        if m.get("content_type") is not None:
            props["content-type"] = m["content_type"]
        msg = amqp.AMQPMessage(
            properties=props, application_properties=headers, application_data=body
        )
        return amqp.from_amqp(msg, fmt)
    if binding == "redis":
        fields = dict(headers)
        value = fields.pop("payload", "").encode("utf-8")
        fields.pop("headers", None)
        msg = kafka.KafkaMessage(
            headers={k: v.encode("utf-8") for k, v in fields.items()}, key=None, value=value
        )
        return kafka.from_kafka(msg, fmt)
    if binding == "json":
        return fmt.read(None, body)
    raise SystemExit(f"unknown binding {binding!r}")


def text(value):
    return value.isoformat() if hasattr(value, "isoformat") else value


def main():
    binding = sys.argv[1]
    m = json.load(sys.stdin)
    try:
        event = read(binding, m)
    except Exception as e:  # the SDK's refusal is the answer
        print(f"the SDK refused the message: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
    attributes = event.get_attributes()
    out = {
        "attributes": {k: text(v) for k, v in sorted(attributes.items())},
        "data": event.get_data(),
    }
    print(json.dumps(out, sort_keys=True))
    expect = m.get("expect")
    if expect is None:
        return
    for name, want in expect.items():
        if name not in attributes:
            sys.exit(f"attribute {name}: missing (expected {want!r})")
        got = attributes[name]
        if name == "time":
            same = got == isoparse(want)
        else:
            same = got == want
        if not same:
            sys.exit(f"attribute {name}: expected {want!r}, the message has {text(got)!r}")
    extra = sorted(set(attributes) - set(expect))
    if extra:
        sys.exit(f"attributes not expected: {', '.join(extra)}")


if __name__ == "__main__":
    main()
