module github.com/gpusampler/gpusampler

go 1.26.8

require (
	github.com/influxdata/line-protocol/v2 v2.2.1
	golang.org/x/sys v0.50.0
)

require github.com/pelletier/go-toml/v2 v2.4.3
