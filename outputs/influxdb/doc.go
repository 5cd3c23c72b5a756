// Package influxdb is the InfluxDB output: it encodes batches as line
// protocol shaped like Telegraf's nvidia_smi input (internal/encoding/
// lineproto: Telegraf's names and field types, ns timestamps, every
// sample with its own driver timestamp, summaries in _mean/_min/_max/
// _last/_count fields, events in gpusampler_events) and posts them with
// one of three write APIs:
//
//	v1  POST /write?db=&rp=&precision=ns            basic auth (username, password)
//	v2  POST /api/v2/write?org=&bucket=&precision=ns "Authorization: Token ..."
//	v3  POST /api/v3/write_lp?db=&precision=nanosecond "Authorization: Bearer ..."
//
// Writer is the HTTP half, shared with outputs/telegraf (which pushes to
// Telegraf's influxdb_listener and influxdb_v2_listener). It splits large
// bodies at line boundaries, gzips on request, and makes one attempt per
// request within the Write's context deadline: it does not retry, the
// caller does (one retry owner per hop). It returns the error as
// unavailable (no server, 429, 502–504: the pump holds the batch) or
// retryable (other 5xx, a timeout); a configured buffer retries either with
// its backoff. Other 4xx are returned as record.Permanent, never
// retried (the pump fails the batch, a buffer drops it as malformed) — 400 is
// InfluxDB's partial write: the valid lines were stored, the rejected ones
// are counted (Stats) and logged. Errors name the output, the status and
// the server's message, with a hint for 401, 403 and 404.
package influxdb
