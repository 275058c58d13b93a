// SPDX-License-Identifier: Apache-2.0

// Command llstep runs one low-latency decode step on one rank (GPU 0) through the Go
// package: bootstrap a one-rank communicator, create a group and a routed handle, dispatch
// three tokens to four experts, combine the identity expert outputs back, and check both
// results exactly. Device memory comes from the CUDA driver loaded at run time (the tests'
// internal helper); an application passes its own device pointers as epcomm.DevicePtr.
//
// Run, from bindings/go (needs a GPU; cgo finds the library through pkg-config):
//
//	go run ./examples/llstep
package main

import (
	"fmt"
	"log"
	"math"
	"runtime"

	"github.com/epcomm/epcomm/bindings/go/epcomm"
	"github.com/epcomm/epcomm/bindings/go/internal/cudadrv"
)

const (
	experts       = 4
	hidden        = 256
	maxTokens     = 4
	tokens        = 3
	topK          = 2
	rowsPerExpert = maxTokens // LayoutExpertPadded zones: ranks * max tokens
)

// Token 0 -> experts 0 and 1, token 1 -> expert 2 (second entry masked), token 2 ->
// experts 1 and 3; weights 0.75 and 0.25.
var (
	topKIdx  = []int32{0, 1, 2, -1, 1, 3}
	weights  = []float32{0.75, 0.25, 0.75, 0, 0.75, 0.25}
	received = [experts][]int{{0}, {0, 2}, {1}, {2}} // per expert, in (source rank, token) order
)

// bf16 of a value bf16 holds exactly (small integers and quarters here).
func bf16(v float32) uint16 { return uint16(math.Float32bits(v) >> 16) }

func xValue(token, channel int) float32 { return float32(channel%16-8) + float32(token) }

func tensor(b *cudadrv.Buffer, dtype epcomm.Dtype, shape ...int64) *epcomm.Tensor {
	return &epcomm.Tensor{Data: epcomm.DevicePtr(b.Address()), Dtype: dtype, Shape: shape}
}

func alloc(bytes int) *cudadrv.Buffer {
	b, err := cudadrv.Alloc(bytes)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func main() {
	runtime.LockOSThread() // the CUDA device is current per OS thread
	version, err := epcomm.Version()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("libepcomm ABI %v (bindings: %v)\n", version, epcomm.BindingsVersion)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	id, err := epcomm.NewUniqueID()
	if err != nil {
		return err
	}
	comm, err := epcomm.InitComm(id, 1, 0, 0) // with more ranks: share id.String() with each
	if err != nil {
		return err
	}
	defer comm.Close()
	if err := cudadrv.UseDevice(0); err != nil {
		return err
	}
	group, err := epcomm.NewGroup(comm, epcomm.GroupConfig{Mode: epcomm.ModeLowLatency, NumExperts: experts,
		Hidden: hidden, MaxTokensPerRank: maxTokens, MaxTopK: topK})
	if err != nil {
		return err
	}
	defer group.Close()

	x := make([]uint16, tokens*hidden)
	for i := range x {
		x[i] = bf16(xValue(i/hidden, i%hidden))
	}
	idx, w, xDev := alloc(len(topKIdx)*4), alloc(len(weights)*4), alloc(len(x)*2)
	outX, counts, out := alloc(experts*rowsPerExpert*hidden*2), alloc(experts*4), alloc(tokens*hidden*2)
	for _, b := range []*cudadrv.Buffer{idx, w, xDev, outX, counts, out} {
		defer b.Free()
	}
	if err := cudadrv.Upload(idx, topKIdx); err != nil {
		return err
	}
	if err := cudadrv.Upload(w, weights); err != nil {
		return err
	}
	if err := cudadrv.Upload(xDev, x); err != nil {
		return err
	}

	handle, err := epcomm.CreateHandle(group, nil, &epcomm.Routing{TopKIdx: tensor(idx, epcomm.DtypeInt32, tokens, topK)}, 0)
	if err != nil {
		return err
	}
	defer handle.Close()
	expertRows := tensor(outX, epcomm.DtypeBF16, experts, rowsPerExpert, hidden)
	// TopKWeights: the default (sender) weighting of Combine applies them on this side.
	if err := handle.Dispatch(&epcomm.DispatchArgs{X: tensor(xDev, epcomm.DtypeBF16, tokens, hidden),
		TopKWeights: tensor(w, epcomm.DtypeFP32, tokens, topK), OutX: expertRows,
		OutExpertCounts: tensor(counts, epcomm.DtypeInt32, experts)}, 0); err != nil {
		return err
	}
	// The identity expert: each token comes back as the sum of its weights times itself.
	if err := handle.Combine(&epcomm.CombineArgs{X: expertRows, Out: tensor(out, epcomm.DtypeBF16, tokens, hidden)}, 0); err != nil {
		return err
	}
	if err := group.AsyncError(); err != nil {
		return err
	}

	gotCounts, err := cudadrv.Download[int32](counts, experts)
	if err != nil {
		return err
	}
	gotRows, err := cudadrv.Download[uint16](outX, experts*rowsPerExpert*hidden)
	if err != nil {
		return err
	}
	gotOut, err := cudadrv.Download[uint16](out, tokens*hidden)
	if err != nil {
		return err
	}
	for e, from := range received {
		if int(gotCounts[e]) != len(from) {
			return fmt.Errorf("expert %d: %d rows, expected %d", e, gotCounts[e], len(from))
		}
		for row, token := range from {
			start := (e*rowsPerExpert + row) * hidden
			for c := 0; c < hidden; c++ {
				if gotRows[start+c] != x[token*hidden+c] {
					return fmt.Errorf("expert %d row %d is not token %d", e, row, token)
				}
			}
		}
	}
	for t := 0; t < tokens; t++ {
		sum := weights[t*topK] + weights[t*topK+1]
		for c := 0; c < hidden; c++ {
			if got, want := gotOut[t*hidden+c], bf16(sum*xValue(t, c)); got != want {
				return fmt.Errorf("token %d channel %d: %#04x, expected %#04x", t, c, got, want)
			}
		}
	}
	fmt.Printf("one LL step on 1 rank: dispatch counts %v and %d combined tokens matched\n", gotCounts, tokens)
	return nil
}
