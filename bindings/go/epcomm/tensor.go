// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// DevicePtr is a device address (or, where a field says so, a pinned host address) as an
// integer, the form CUDA bindings and frameworks hand out (a CUdeviceptr, a tensor's
// data_ptr). Being an integer, not an unsafe.Pointer, it keeps `go vet` quiet in the
// code that builds Tensors: the conversion to a C pointer happens inside this package.
type DevicePtr uintptr

// Stream is a cudaStream_t as an integer; 0 is the legacy default stream.
type Stream uintptr

// Tensor describes memory for the C ABI (EpcTensor), with DLPack's meaning: Shape and
// Strides count elements, outermost dimension first (row-major), and nil Strides means
// contiguous. Data is an address from your CUDA binding or framework: epcomm never
// allocates, copies or frees it, and Go's garbage collector does not manage it. A Tensor
// only describes the memory; the calls it is passed to read or write it in stream order,
// so the memory must stay allocated until the stream has passed those calls (after a
// send-only call, its Complete).
type Tensor struct {
	Data    DevicePtr // may be 0 only when the tensor has no elements
	Dtype   Dtype
	Shape   []int64 // at most TensorMaxDims extents, each >= 0
	Strides []int64 // nil: contiguous; else one stride per dimension, in elements
}

// toC checks what the descriptor itself requires (the library checks the rest: dtype,
// shape and contiguity for the call) and fills *c. `name` is the field's C name, for
// messages.
func (t *Tensor) toC(name string, c *C.EpcTensor) error {
	if len(t.Shape) > TensorMaxDims {
		return argumentError("tensor %s has %d dimensions; an EpcTensor holds at most %d",
			name, len(t.Shape), TensorMaxDims)
	}
	if t.Strides != nil && len(t.Strides) != len(t.Shape) {
		return argumentError("tensor %s has %d strides for %d dimensions", name, len(t.Strides), len(t.Shape))
	}
	*c = C.EpcTensor{}
	for i, extent := range t.Shape {
		if extent < 0 {
			return argumentError("tensor %s has the negative extent %d in dimension %d", name, extent, i)
		}
		c.shape[i] = C.int64_t(extent)
		if t.Strides != nil {
			c.strides[i] = C.int64_t(t.Strides[i])
		}
	}
	// The address is stored as the integer it is: it never becomes a Go pointer, and it
	// points outside Go's heap, so the garbage collector and cgo's checks ignore it.
	*(*uintptr)(unsafe.Pointer(&c.data)) = uintptr(t.Data)
	c.dtype = C.EpcDtype(t.Dtype)
	c.ndim = C.int32_t(len(t.Shape))
	return nil
}

// tensorField is one tensor field of an argument struct: its C name and the tensor, nil
// when absent.
type tensorField struct {
	name   string
	tensor *Tensor
}

// tensorSet is the converted tensors of one call, in C field order, and a bit per field
// that is present. It holds no Go pointers, so cgo lets C read it during the call; the C
// side points the argument struct's fields at its entries (see the helpers in call.go).
type tensorSet struct {
	tensors [maxTensorFields]C.EpcTensor
	present C.uint32_t
}

const maxTensorFields = 16

// convert fills the set from fields, in order (see toC).
func (s *tensorSet) convert(fields ...tensorField) error {
	if len(fields) > maxTensorFields {
		panic("epcomm: too many tensor fields")
	}
	for i, field := range fields {
		if field.tensor == nil {
			continue
		}
		if err := field.tensor.toC(field.name, &s.tensors[i]); err != nil {
			return err
		}
		s.present |= 1 << uint(i)
	}
	return nil
}
