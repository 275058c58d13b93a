// SPDX-License-Identifier: Apache-2.0
package epcomm

/*
#include <epcomm/epcomm.h>
*/
import "C"

import "unsafe"

// Tensor describes device memory for the C ABI (EpcTensor), with DLPack's meaning: Shape
// and Strides count elements, outermost dimension first (row-major), and nil Strides means
// contiguous. Data is a device address from your CUDA binding or framework: epcomm never
// allocates, copies or frees it, and Go's garbage collector does not manage it. A Tensor
// only describes the memory; the calls it is passed to read or write it in stream order,
// so the memory must stay allocated until the stream has passed those calls.
type Tensor struct {
	Data    unsafe.Pointer // device address; may be nil only when the tensor has no elements
	Dtype   Dtype
	Shape   []int64 // at most TensorMaxDims extents, each >= 0
	Strides []int64 // nil: contiguous; else one stride per dimension, in elements
}

// toC checks what the descriptor itself requires (the library checks the rest: dtype,
// shape and contiguity for the call) and fills an EpcTensor. `name` is the parameter's C
// name, for messages.
func (t Tensor) toC(name string) (C.EpcTensor, error) {
	var c C.EpcTensor
	if len(t.Shape) > TensorMaxDims {
		return c, argumentError("tensor %s has %d dimensions; an EpcTensor holds at most %d",
			name, len(t.Shape), TensorMaxDims)
	}
	if t.Strides != nil && len(t.Strides) != len(t.Shape) {
		return c, argumentError("tensor %s has %d strides for %d dimensions", name, len(t.Strides), len(t.Shape))
	}
	for i, extent := range t.Shape {
		if extent < 0 {
			return c, argumentError("tensor %s has the negative extent %d in dimension %d", name, extent, i)
		}
		c.shape[i] = C.int64_t(extent)
		if t.Strides != nil {
			c.strides[i] = C.int64_t(t.Strides[i])
		}
	}
	c.data = t.Data
	c.dtype = C.EpcDtype(t.Dtype)
	c.ndim = C.int32_t(len(t.Shape))
	return c, nil
}

// tensorArg is one tensor argument of a call: its C parameter name and the tensor, nil for
// an optional tensor that is absent.
type tensorArg struct {
	name   string
	tensor *Tensor
}

// cTensors converts a call's tensor arguments in order (see toC); an absent optional one
// stays a nil pointer, which the library reads as NULL.
func cTensors(args ...tensorArg) ([]*C.EpcTensor, error) {
	converted := make([]C.EpcTensor, len(args))
	pointers := make([]*C.EpcTensor, len(args))
	for i, arg := range args {
		if arg.tensor == nil {
			continue
		}
		c, err := arg.tensor.toC(arg.name)
		if err != nil {
			return nil, err
		}
		converted[i] = c
		pointers[i] = &converted[i]
	}
	return pointers, nil
}
