// Package testsvc is the proto service the tests of idemgrpc and
// idemconnect call, built without protoc: the descriptor of
//
//	syntax = "proto3";
//	package idemtest.v1;
//	message CreateOrderRequest { string item = 1; int64 quantity = 2; map<string, string> labels = 3; }
//	message GetOrderRequest { string id = 1; }
//	message Order { string id = 1; string item = 2; int64 exec = 3; string key = 4; }
//	service Orders {
//	  rpc Create(CreateOrderRequest) returns (Order);
//	  rpc Get(GetOrderRequest) returns (Order) { option idempotency_level = NO_SIDE_EFFECTS; }
//	}
//
// registered in protoregistry.GlobalFiles, with dynamicpb messages.
package testsvc

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The service's names.
const (
	Service = "idemtest.v1.Orders"
	Create  = "/idemtest.v1.Orders/Create"
	Get     = "/idemtest.v1.Orders/Get"
)

// The descriptors, registered by init.
var (
	File        protoreflect.FileDescriptor
	CreateInput protoreflect.MessageDescriptor
	GetInput    protoreflect.MessageDescriptor
	Order       protoreflect.MessageDescriptor
	CreateRPC   protoreflect.MethodDescriptor
	GetRPC      protoreflect.MethodDescriptor
)

func field(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
	return &descriptorpb.FieldDescriptorProto{
		Name: proto.String(name), Number: proto.Int32(n), JsonName: proto.String(name),
		Type: typ.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
	}
}

func init() {
	str, i64 := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_INT64
	labels := field("labels", 3, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE)
	labels.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	labels.TypeName = proto.String(".idemtest.v1.CreateOrderRequest.LabelsEntry")
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("idemtest/v1/orders.proto"),
		Package: proto.String("idemtest.v1"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{
				Name:  proto.String("CreateOrderRequest"),
				Field: []*descriptorpb.FieldDescriptorProto{field("item", 1, str), field("quantity", 2, i64), labels},
				NestedType: []*descriptorpb.DescriptorProto{{
					Name:    proto.String("LabelsEntry"),
					Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, str), field("value", 2, str)},
					Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
				}},
			},
			{Name: proto.String("GetOrderRequest"), Field: []*descriptorpb.FieldDescriptorProto{field("id", 1, str)}},
			{Name: proto.String("Order"), Field: []*descriptorpb.FieldDescriptorProto{
				field("id", 1, str), field("item", 2, str), field("exec", 3, i64), field("key", 4, str)}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Create"), InputType: proto.String(".idemtest.v1.CreateOrderRequest"), OutputType: proto.String(".idemtest.v1.Order")},
				{Name: proto.String("Get"), InputType: proto.String(".idemtest.v1.GetOrderRequest"), OutputType: proto.String(".idemtest.v1.Order"),
					Options: &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()}},
			},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(err)
	}
	File = f
	CreateInput = f.Messages().ByName("CreateOrderRequest")
	GetInput = f.Messages().ByName("GetOrderRequest")
	Order = f.Messages().ByName("Order")
	CreateRPC = f.Services().ByName("Orders").Methods().ByName("Create")
	GetRPC = f.Services().ByName("Orders").Methods().ByName("Get")
}

// NewCreate returns a CreateOrderRequest.
func NewCreate(item string, quantity int64, labels map[string]string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(CreateInput)
	m.Set(CreateInput.Fields().ByName("item"), protoreflect.ValueOfString(item))
	m.Set(CreateInput.Fields().ByName("quantity"), protoreflect.ValueOfInt64(quantity))
	if len(labels) > 0 {
		mp := m.Mutable(CreateInput.Fields().ByName("labels")).Map()
		for k, v := range labels {
			mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
		}
	}
	return m
}

// NewGet returns a GetOrderRequest.
func NewGet(id string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(GetInput)
	m.Set(GetInput.Fields().ByName("id"), protoreflect.ValueOfString(id))
	return m
}

// NewOrder returns an Order.
func NewOrder(id, item string, exec int64, key string) *dynamicpb.Message {
	m := dynamicpb.NewMessage(Order)
	m.Set(Order.Fields().ByName("id"), protoreflect.ValueOfString(id))
	m.Set(Order.Fields().ByName("item"), protoreflect.ValueOfString(item))
	m.Set(Order.Fields().ByName("exec"), protoreflect.ValueOfInt64(exec))
	m.Set(Order.Fields().ByName("key"), protoreflect.ValueOfString(key))
	return m
}

// String returns the string field name of m.
func String(m proto.Message, name string) string {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).String()
}

// Int returns the int64 field name of m.
func Int(m proto.Message, name string) int64 {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).Int()
}

// Handler implements the service's methods.
type Handler interface {
	Create(ctx context.Context, in proto.Message) (proto.Message, error)
	Get(ctx context.Context, in proto.Message) (proto.Message, error)
}

// GRPC returns the grpc-go service description of Orders served by h.
func GRPC(h Handler) (*grpc.ServiceDesc, any) {
	method := func(name, full string, in protoreflect.MessageDescriptor, call func(context.Context, proto.Message) (proto.Message, error)) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := dynamicpb.NewMessage(in)
			if err := dec(req); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) { return call(ctx, req.(proto.Message)) }
			if ic == nil {
				return handler(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: h, FullMethod: full}, handler)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			method("Create", Create, CreateInput, h.Create),
			method("Get", Get, GetInput, h.Get),
		},
		Metadata: File.Path(),
	}, h
}

// initInput makes a handler's zero dynamicpb request a message of the
// procedure's input type.
func initInput(spec connect.Spec, msg any) error {
	if m, ok := msg.(*dynamicpb.Message); ok {
		*m = *dynamicpb.NewMessage(spec.Schema.(protoreflect.MethodDescriptor).Input())
	}
	return nil
}

// initOutput does the same for a client's response.
func initOutput(spec connect.Spec, msg any) error {
	if m, ok := msg.(*dynamicpb.Message); ok {
		*m = *dynamicpb.NewMessage(spec.Schema.(protoreflect.MethodDescriptor).Output())
	}
	return nil
}

// Connect returns the connect-go handlers of Orders served by h, with
// the schema and idempotency levels generated code would set.
func Connect(h Handler, opts ...connect.HandlerOption) map[string]*connect.Handler {
	unary := func(call func(context.Context, proto.Message) (proto.Message, error)) func(context.Context, *connect.Request[dynamicpb.Message]) (*connect.Response[dynamicpb.Message], error) {
		return func(ctx context.Context, req *connect.Request[dynamicpb.Message]) (*connect.Response[dynamicpb.Message], error) {
			res, err := call(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(res.(*dynamicpb.Message)), nil
		}
	}
	base := append([]connect.HandlerOption{connect.WithRequestInitializer(initInput)}, opts...)
	return map[string]*connect.Handler{
		Create: connect.NewUnaryHandler(Create, unary(h.Create), append(base, connect.WithSchema(CreateRPC))...),
		Get: connect.NewUnaryHandler(Get, unary(h.Get),
			append(base, connect.WithSchema(GetRPC), connect.WithIdempotency(connect.IdempotencyNoSideEffects))...),
	}
}

// ConnectWithoutSchema is Connect's Create handler built without
// connect.WithSchema, as code from an older protoc-gen-connect-go or a
// hand-written handler is: the interceptor finds the method's descriptor
// in protoregistry.GlobalFiles, where this service is registered.
func ConnectWithoutSchema(h Handler, opts ...connect.HandlerOption) (string, *connect.Handler) {
	// The request's type comes from the registered descriptor, as a
	// generated handler's comes from its Go type.
	init := func(_ connect.Spec, msg any) error {
		if m, ok := msg.(*dynamicpb.Message); ok {
			*m = *dynamicpb.NewMessage(CreateRPC.Input())
		}
		return nil
	}
	base := append([]connect.HandlerOption{connect.WithRequestInitializer(init)}, opts...)
	return Create, connect.NewUnaryHandler(Create, func(ctx context.Context, req *connect.Request[dynamicpb.Message]) (*connect.Response[dynamicpb.Message], error) {
		res, err := h.Create(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(res.(*dynamicpb.Message)), nil
	}, base...)
}

// ConnectClients returns connect-go clients of Create and Get at baseURL.
func ConnectClients(hc connect.HTTPClient, baseURL string, opts ...connect.ClientOption) (create, get *connect.Client[dynamicpb.Message, dynamicpb.Message]) {
	base := append([]connect.ClientOption{connect.WithResponseInitializer(initOutput)}, opts...)
	create = connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, baseURL+Create, append(base, connect.WithSchema(CreateRPC))...)
	get = connect.NewClient[dynamicpb.Message, dynamicpb.Message](hc, baseURL+Get,
		append(base, connect.WithSchema(GetRPC), connect.WithIdempotency(connect.IdempotencyNoSideEffects))...)
	return create, get
}
