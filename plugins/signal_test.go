package plugins_test

import (
	"fmt"
	"strconv"
	"syscall"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/sampler"
)

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

func itoa(n int) string { return strconv.Itoa(n) }

func fmtSscan(s string, n *int) (int, error) { return fmt.Sscan(s, n) }

func newAgent(src sampler.Source, cfg *appconfig.Config, reg *outputs.Registry, strict bool) (*agent.Agent, error) {
	return agent.New(src, cfg, agent.Options{Registry: reg, Strict: strict})
}
