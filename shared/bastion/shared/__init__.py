"""The runtime every Bastion service uses: bus, service wrapper, settings, telemetry, logs.

Modules:
- `errors`: the one error hierarchy, each error a code and a sentence.
- `settings`: typed settings loaded once from environment variables.
- `codec`: msgpack encoding and typed decoding of wire messages.
- `bus`: connecting to NATS and the typed request helper.
- `service`: serving endpoints as a NATS micro service, every request answered.
- `telemetry`: tracing set up from the standard `OTEL_*` variables; `traceparent` in headers.
- `logs`: structured JSON logs carrying the trace id.
- `runner`: a service's `main`, with SIGTERM draining in-flight work.
- `statedir`: where a local Bastion keeps its state and how commands find a running one.
"""
