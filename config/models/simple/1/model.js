// The `simple` model: element-wise sum and difference of two INT32 tensors of the same shape.
// The js backend calls execute() with a batch of requests and expects one response per request.

export async function execute (requests) {
  return requests.map(({ inputs }) => {
    const a = inputs.INPUT0
    const b = inputs.INPUT1
    const sum = new Int32Array(a.data.length)
    const diff = new Int32Array(a.data.length)
    for (let i = 0; i < a.data.length; i++) {
      // `| 0` keeps Triton's int32 wrap-around on overflow.
      sum[i] = (a.data[i] + b.data[i]) | 0
      diff[i] = (a.data[i] - b.data[i]) | 0
    }
    return {
      outputs: [
        { name: 'OUTPUT0', shape: a.shape, data: sum },
        { name: 'OUTPUT1', shape: a.shape, data: diff }
      ]
    }
  })
}
