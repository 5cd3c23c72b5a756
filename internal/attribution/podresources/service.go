package podresources

import (
	"context"

	"google.golang.org/grpc"
)

// Full method names of the kubelet's PodResourcesLister service.
const (
	ServiceName = "v1.PodResourcesLister"
	MethodList  = "/" + ServiceName + "/List"
	MethodGet   = "/" + ServiceName + "/Get"
)

// Client calls a kubelet's PodResourcesLister.
type Client struct{ cc grpc.ClientConnInterface }

// NewClient returns a client on cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// List returns the resources of every pod on the node.
func (c *Client) List(ctx context.Context, in *ListPodResourcesRequest, opts ...grpc.CallOption) (*ListPodResourcesResponse, error) {
	out := new(ListPodResourcesResponse)
	if err := c.cc.Invoke(ctx, MethodList, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Get returns one pod's resources (kubelets from 1.27 with the
// KubeletPodResourcesGet feature gate; Unimplemented elsewhere).
func (c *Client) Get(ctx context.Context, in *GetPodResourcesRequest, opts ...grpc.CallOption) (*GetPodResourcesResponse, error) {
	out := new(GetPodResourcesResponse)
	if err := c.cc.Invoke(ctx, MethodGet, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Server is what a PodResourcesLister serves (tests stand in for the
// kubelet with it).
type Server interface {
	List(context.Context, *ListPodResourcesRequest) (*ListPodResourcesResponse, error)
	Get(context.Context, *GetPodResourcesRequest) (*GetPodResourcesResponse, error)
}

// Register registers srv as the PodResourcesLister service on s.
func Register(s grpc.ServiceRegistrar, srv Server) {
	s.RegisterService(&serviceDesc, srv)
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "List", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(ListPodResourcesRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(Server).List(ctx, in)
		}},
		{MethodName: "Get", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(GetPodResourcesRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(Server).Get(ctx, in)
		}},
	},
	Metadata: "api.proto",
}
