package rpc

import (
	"context"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/gpusampler/gpusampler/plugins/proto"
)

// Handshake is the go-plugin handshake both ends use. The host sets the
// magic cookie in the plugin's environment; a binary started without it
// refuses to run as a plugin.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GPUSAMPLER_PLUGIN",
	MagicCookieValue: "output-v1-5f0c1b7e",
}

// PluginName is the name the output service is dispensed under.
const PluginName = "output"

// ParentPIDEnv names the environment variable in which the host passes its
// pid; the SDK exits when its parent is no longer that process.
const ParentPIDEnv = "GPUSAMPLER_PLUGIN_PARENT_PID"

// GRPCPlugin is the go-plugin glue: on the plugin side it registers Impl
// (a Server, or a MuxServer for a process that serves several outputs), on
// the host side it returns a proto.OutputClient.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is set on the plugin side only.
	Impl proto.OutputServer
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	proto.RegisterOutputServer(s, p.Impl)
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return proto.NewOutputClient(c), nil
}

// ServerOptions raise gRPC's message limits on the plugin side.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize)}
}

// DialOptions raise gRPC's message limits on the host side.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(MaxMessageSize),
		grpc.MaxCallRecvMsgSize(MaxMessageSize))}
}
