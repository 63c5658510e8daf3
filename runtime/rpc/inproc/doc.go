// Package inproc calls a gRPC server's services from the same process
// without serialising and without a transport: a Channel records the
// services registered on the server and hands out client connections
// (grpc.ClientConnInterface) whose calls run the registered handlers
// directly, through the same interceptor chain as the network server's
// (recovery, decoding, auth, error mapping, forwarding, metrics). Messages
// are copied between caller and handler, never shared, and a stream's
// queues are bounded so that a reader that stops reading stops its sender,
// as on a network. The daemon's facade uses it when it runs in the same
// process as the runtime; a split facade dials the gRPC port instead.
// GracefulStop and Stop end its calls as the network server's do, and
// return only once no handler runs (rpc.Server calls them with the
// server's own).
package inproc
