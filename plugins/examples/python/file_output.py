#!/usr/bin/python3
"""A gpusampler output plugin in Python: every record it receives, appended
to a JSON Lines file.

It speaks the plugin protocol of plugins/README.md with nothing but grpcio,
protobuf and cryptography (Debian: python3-grpcio, python3-protobuf,
python3-cryptography): the go-plugin handshake line, AutoMTLS, the standard
gRPC health service and the gpusampler.plugin.v1.Output service. Copy it and
replace FileSink with your own sink.

Config ([outputs.plugin.config]):
    path = "/var/lib/gpusampler/records.jsonl"   # required

One line per record:
    {"record": "sample", "time_ns": ..., "gpu": "GPU-...", "index": 0,
     "metric": "power_draw", "unit": "W", "value": 612.5, "point_read": false}
    {"record": "summary", "start_ns": ..., "interval_ns": ..., "gpu": ...,
     "metric": ..., "mean": ..., "min": ..., "max": ..., "last": ..., "count": ...}
    {"record": "event", "kind": "xid", "gpu": ..., "start_ns": ...,
     "end_ns": ..., "message": ..., "attrs": {...}, "fields": {...}}
    {"record": "device", "index": 0, "uuid": ..., "name": ..., ...}
"""

import base64
import datetime
import json
import os
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

sys.dont_write_bytecode = True  # no __pycache__ beside an installed plugin
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))
import output_pb2  # noqa: E402  (generated: ./generate.sh)
from recordpb import records_pb2  # noqa: E402,F401  (output_pb2 needs it)

MAGIC_KEY, MAGIC_VALUE = "GPUSAMPLER_PLUGIN", "output-v1-5f0c1b7e"
CORE_PROTOCOL, APP_PROTOCOL = "1", "1"
MAX_MESSAGE = 64 << 20  # the host sends batches of up to max_batch samples


def log(level, message, **attrs):
    """One JSON object per line on stderr: the host keeps level and attributes."""
    rec = {"@level": level, "@message": message, "@timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    rec.update(attrs)
    print(json.dumps(rec), file=sys.stderr, flush=True)


class FileSink:
    """Appends records to a JSON Lines file. Replace this class for another sink."""

    def __init__(self, path):
        self.path = path
        self.f = open(path, "a", encoding="utf-8")
        self.written = 0

    def write_lines(self, lines):
        self.f.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
        self.f.flush()
        self.written += len(lines)

    def close(self):
        self.f.close()


class Output:
    """The gpusampler.plugin.v1.Output service."""

    def __init__(self, stop):
        self.stop = stop
        self.sink = None
        self.metrics = {}  # id -> (name, unit)
        self.devices = {}  # index -> uuid
        self.batches = 0
        self.last_error = ""

    def Configure(self, req, ctx):
        errors = []
        fields = dict(req.config.fields)
        path = fields.pop("path", None)
        if path is None:
            errors.append(output_pb2.ConfigError(key="path", message="required: the JSON Lines file to append to"))
        elif path.WhichOneof("kind") != "string_value" or not path.string_value:
            errors.append(output_pb2.ConfigError(key="path", message="must be a non-empty string"))
        for key in sorted(fields):
            errors.append(output_pb2.ConfigError(key=key, message="unknown key (this plugin takes only path)"))
        if not errors:
            try:
                self.sink = FileSink(path.string_value)
            except OSError as e:
                errors.append(output_pb2.ConfigError(key="path", message=f"cannot open for appending: {e.strerror}"))
        self.metrics = {m.id: (m.name, m.unit) for m in req.metrics}
        log("info", "configured", path=path.string_value if path is not None else "", metrics=len(self.metrics))
        return output_pb2.ConfigureResponse(errors=errors)

    def Write(self, req, ctx):
        lines = []
        for d in req.devices:
            self.devices[d.index] = d.uuid
            lines.append({"record": "device", "index": d.index, "uuid": d.uuid, "name": d.name,
                          "pci_bus_id": d.pci_bus_id, "simulated": d.simulated, "generation": d.generation})
        s = req.samples
        times = list(s.time_ns)
        if not times and s.time_delta_ns:  # the compact form: deltas from the previous sample
            t = 0
            for dt in s.time_delta_ns:
                t += dt
                times.append(t)
        for i, t in enumerate(times):
            name, unit = self.metrics.get(s.metric[i], (f"metric_{s.metric[i]}", ""))
            lines.append({"record": "sample", "time_ns": t, "gpu": self.devices.get(s.device[i], ""),
                          "index": s.device[i], "metric": name, "unit": unit, "value": s.value[i],
                          "point_read": bool(s.flags[i] & 1) if i < len(s.flags) else False})
        m = req.summaries
        for i in range(len(m.start_ns)):
            name, unit = self.metrics.get(m.metric[i], (f"metric_{m.metric[i]}", ""))
            lines.append({"record": "summary", "start_ns": m.start_ns[i], "interval_ns": m.interval_ns[i],
                          "gpu": self.devices.get(m.device[i], ""), "index": m.device[i], "metric": name,
                          "unit": unit, "mean": m.mean[i], "min": m.min[i], "max": m.max[i], "last": m.last[i],
                          "count": m.count[i]})
        for e in req.events:
            lines.append({"record": "event", "kind": e.kind, "gpu": self.devices.get(e.device, ""),
                          "index": e.device, "start_ns": e.start_ns, "end_ns": e.end_ns, "message": e.message,
                          "attrs": {a.key: a.value for a in e.attrs},
                          "fields": {f.key: (int(f.value) if f.is_int else f.value) for f in e.fields}})
        try:
            self.sink.write_lines(lines)
        except OSError as e:
            # The sink is down (disk full, file gone): UNAVAILABLE keeps the
            # batch on the host, which offers it again later.
            self.last_error = str(e)
            ctx.abort(grpc.StatusCode.UNAVAILABLE, f"write {self.sink.path}: {e.strerror}")
        self.batches += 1
        return output_pb2.WriteResponse()

    def Health(self, req, ctx):
        stats = [records_pb2.Field(key="batches", value=self.batches, is_int=True),
                 records_pb2.Field(key="lines", value=self.sink.written if self.sink else 0, is_int=True)]
        return output_pb2.HealthResponse(ok=not self.last_error, message=self.last_error, stats=stats)

    def Close(self, req, ctx):
        if self.sink:
            self.sink.close()
        log("info", "closed", batches=self.batches)
        self.stop.set()
        return output_pb2.CloseResponse()


def self_signed():
    """A certificate for AutoMTLS: ECDSA P-256, SAN localhost, as go-plugin makes its own."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpusampler plugin"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=30)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True,
                                         content_commitment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.DER)


def unary(fn, req_type, resp_type=None):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=req_type.FromString if req_type else (lambda b: b),
        response_serializer=(lambda m: m.SerializeToString()) if resp_type is None else resp_type)


def main():
    if os.environ.get(MAGIC_KEY) != MAGIC_VALUE:
        print("This is a gpusampler output plugin: gpusampler runs it ([[outputs.plugin]]); "
              "try it with: gpusampler plugin test " + sys.argv[0], file=sys.stderr)
        return 1
    if APP_PROTOCOL not in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", APP_PROTOCOL).split(","):
        log("error", "no common protocol version", offered=os.environ.get("PLUGIN_PROTOCOL_VERSIONS"))
        return 1
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "").encode()
    if not client_cert:
        log("error", "PLUGIN_CLIENT_CERT is not set: the host must use AutoMTLS")
        return 1
    key_pem, cert_pem, cert_der = self_signed()

    stop = threading.Event()
    out = Output(stop)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                  ("grpc.max_send_message_length", MAX_MESSAGE)])
    server.add_generic_rpc_handlers([
        grpc.method_handlers_generic_handler("gpusampler.plugin.v1.Output", {
            "Configure": unary(out.Configure, output_pb2.ConfigureRequest),
            "Write": unary(out.Write, output_pb2.WriteRequest),
            "Health": unary(out.Health, output_pb2.HealthRequest),
            "Close": unary(out.Close, output_pb2.CloseRequest),
        }),
        # grpc.health.v1.Health/Check: HealthCheckResponse{status: SERVING}
        # is the two bytes 08 01 (no generated code needed).
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": unary(lambda req, ctx: b"\x08\x01", None, lambda b: b),
        }),
        # go-plugin's controller: Shutdown(Empty) asks the plugin to exit.
        grpc.method_handlers_generic_handler("plugin.GRPCController", {
            "Shutdown": unary(lambda req, ctx: (stop.set(), b"")[1], None, lambda b: b),
        }),
    ])
    creds = grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=client_cert,
                                        require_client_auth=True)
    sock_dir = tempfile.mkdtemp(prefix="gpusampler-plugin-")
    sock = os.path.join(sock_dir, "plugin.sock")
    server.add_secure_port("unix:" + sock, creds)
    server.start()

    # The handshake: one line on stdout, nothing else ever after.
    cert_b64 = base64.b64encode(cert_der).decode().rstrip("=")
    sys.stdout.write(f"{CORE_PROTOCOL}|{APP_PROTOCOL}|unix|{sock}|grpc|{cert_b64}\n")
    sys.stdout.flush()
    log("info", "serving", socket=sock)

    # Exit when the host is gone (its pid is no longer our parent).
    parent = os.environ.get("GPUSAMPLER_PLUGIN_PARENT_PID")
    while not stop.wait(1.0):
        if parent and str(os.getppid()) != parent:
            log("warn", "the host exited; stopping")
            break
    server.stop(grace=1.0).wait()
    try:
        os.unlink(sock)
        os.rmdir(sock_dir)
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
