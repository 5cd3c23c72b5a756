module github.com/gpusampler/gpusampler

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/influxdata/line-protocol/v2 v2.2.1
	github.com/pelletier/go-toml/v2 v2.4.3
	golang.org/x/sys v0.50.0
)

require github.com/google/uuid v1.6.0 // indirect
