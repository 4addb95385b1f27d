// The N-API layer: converts JavaScript plans and arrays into the core's types (checking every field, so a mistake is a
// TypeError naming it and never a crash), wraps a Session, and runs it on the session's own executor thread
// (src/executor.h), the result coming back through a thread-safe function, so the event loop never waits on a model.
// Exports what NativeModule in native/index.ts declares.
//
// Errors: a malformed plan or argument throws (or, from run(), rejects with) a TypeError or RangeError; a plan the
// engine rejects throws an Error with code NATIVE_INVALID_PLAN; a run whose data is bad (an index out of range)
// rejects with code NATIVE_INVALID_INPUT, any other failure with NATIVE_EXECUTION_FAILED.
#include <napi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../src/cuda/cuda_api.h"
#include "../src/executor.h"
#include "../src/plan.h"
#include "../src/session.h"
#include "../src/sgemm.h"
#include "../src/thread_pool.h"

namespace {

using flotilla::Activation;
using flotilla::DType;
using flotilla::OpType;
using flotilla::Plan;
using flotilla::Precision;
using flotilla::Session;

// ---------------------------------------------------------------------------------------------------------------
// Reading JavaScript values with errors that name the field

[[noreturn]] void throwType(Napi::Env env, const std::string& message) { throw Napi::TypeError::New(env, message); }

Napi::Error codedError(Napi::Env env, const std::string& message, const char* code) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  return e;
}

std::string describe(Napi::Value v) {
  if (v.IsUndefined()) return "undefined";
  if (v.IsNull()) return "null";
  if (v.IsTypedArray()) {
    switch (v.As<Napi::TypedArray>().TypedArrayType()) {
      case napi_float32_array: return "a Float32Array";
      case napi_int32_array: return "an Int32Array";
      case napi_bigint64_array: return "a BigInt64Array";
      case napi_float64_array: return "a Float64Array";
      default: return "another typed array";
    }
  }
  if (v.IsArray()) return "an array";
  if (v.IsString()) return "a string";
  if (v.IsNumber()) return "the number " + v.ToString().Utf8Value();
  if (v.IsBoolean()) return "a boolean";
  if (v.IsBigInt()) return "a bigint";
  if (v.IsFunction()) return "a function";
  return "an object";
}

bool isInteger(Napi::Value v, double lo, double hi, int64_t* out) {
  if (!v.IsNumber()) return false;
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d) || std::floor(d) != d || d < lo || d > hi) return false;
  *out = static_cast<int64_t>(d);
  return true;
}

constexpr double kMaxSafe = 9007199254740991.0;

int64_t readInt(Napi::Env env, Napi::Value v, const std::string& field, double lo, double hi) {
  int64_t out = 0;
  if (!isInteger(v, lo, hi, &out)) {
    throwType(env, field + " must be an integer in [" + Napi::Number::New(env, lo).ToString().Utf8Value() + ", " +
                       Napi::Number::New(env, hi).ToString().Utf8Value() + "], got " + describe(v));
  }
  return out;
}

std::string readString(Napi::Env env, Napi::Value v, const std::string& field) {
  if (!v.IsString()) throwType(env, field + " must be a string, got " + describe(v));
  return v.As<Napi::String>().Utf8Value();
}

Napi::Array readArray(Napi::Env env, Napi::Value v, const std::string& field) {
  if (!v.IsArray()) throwType(env, field + " must be an array, got " + describe(v));
  return v.As<Napi::Array>();
}

std::vector<int64_t> readIntArray(Napi::Env env, Napi::Value v, const std::string& field, double lo, double hi) {
  Napi::Array a = readArray(env, v, field);
  std::vector<int64_t> out(a.Length());
  for (uint32_t i = 0; i < a.Length(); i++) out[i] = readInt(env, a.Get(i), field + "[" + std::to_string(i) + "]", lo, hi);
  return out;
}

std::vector<int32_t> readInt32Array(Napi::Env env, Napi::Value v, const std::string& field) {
  std::vector<int64_t> wide = readIntArray(env, v, field, -2147483648.0, 2147483647.0);
  return std::vector<int32_t>(wide.begin(), wide.end());
}

DType parseDType(Napi::Env env, Napi::Value v, const std::string& field) {
  const std::string s = readString(env, v, field);
  if (s == "float32") return DType::F32;
  if (s == "int32") return DType::I32;
  if (s == "int64") return DType::I64;
  throwType(env, field + " must be 'float32', 'int32' or 'int64', got '" + s + "'");
}

OpType parseOpType(Napi::Env env, Napi::Value v, const std::string& field) {
  const std::string s = readString(env, v, field);
  std::string known;
  for (int32_t t = 0; t < static_cast<int32_t>(OpType::Count); t++) {
    const char* name = flotilla::opTypeName(static_cast<OpType>(t));
    if (s == name) return static_cast<OpType>(t);
    known += (t ? ", " : "") + std::string(name);
  }
  throwType(env, field + " '" + s + "' is not an op the engine runs (" + known + ")");
}

const char* const kActivationNames[] = {"none", "relu", "leaky_relu", "sigmoid", "tanh", "gelu", "gelu_tanh"};

Activation parseActivation(Napi::Env env, Napi::Value v, const std::string& field) {
  const std::string s = readString(env, v, field);
  for (int32_t i = 0; i < 7; i++) {
    if (s == kActivationNames[i]) return static_cast<Activation>(i);
  }
  throwType(env, field + " must be one of 'none', 'relu', 'leaky_relu', 'sigmoid', 'tanh', 'gelu', 'gelu_tanh', got '" +
                     s + "'");
}

napi_typedarray_type typedArrayTypeOf(DType t) {
  switch (t) {
    case DType::F32: return napi_float32_array;
    case DType::I32: return napi_int32_array;
    case DType::I64: return napi_bigint64_array;
  }
  return napi_float32_array;
}

const char* typedArrayName(DType t) {
  switch (t) {
    case DType::F32: return "Float32Array";
    case DType::I32: return "Int32Array";
    case DType::I64: return "BigInt64Array";
  }
  return "?";
}

/** A typed array's element count and data pointer (the offset applied); throws when `v` is not one of `type`. */
void* typedArrayData(Napi::Env env, Napi::Value v, napi_typedarray_type type, const std::string& field,
                     const char* expected, size_t* length) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != type) {
    throwType(env, field + " must be a " + expected + ", got " + describe(v));
  }
  napi_typedarray_type actual;
  void* data = nullptr;
  napi_value buffer;
  size_t offset = 0;
  const napi_status status = napi_get_typedarray_info(env, v, &actual, length, &data, &buffer, &offset);
  if (status != napi_ok) throwType(env, field + ": cannot read the typed array");
  return data;
}

bool has(Napi::Object o, const char* key) {
  return o.Has(key) && !o.Get(key).IsUndefined();
}

void readAttrs(Napi::Env env, Napi::Value v, const std::string& field, flotilla::OpAttrs* a) {
  if (v.IsUndefined()) return;
  if (!v.IsObject() || v.IsArray()) throwType(env, field + " must be an object, got " + describe(v));
  Napi::Object o = v.As<Napi::Object>();
  auto boolean = [&](const char* key, bool* out) {
    if (!has(o, key)) return;
    Napi::Value x = o.Get(key);
    if (!x.IsBoolean()) throwType(env, field + "." + key + " must be a boolean, got " + describe(x));
    *out = x.As<Napi::Boolean>().Value();
  };
  auto number = [&](const char* key, float* out) {
    if (!has(o, key)) return;
    Napi::Value x = o.Get(key);
    if (!x.IsNumber() || !std::isfinite(x.As<Napi::Number>().DoubleValue())) {
      throwType(env, field + "." + key + " must be a finite number, got " + describe(x));
    }
    *out = x.As<Napi::Number>().FloatValue();
  };
  auto integer = [&](const char* key, int32_t* out) {
    if (has(o, key)) *out = static_cast<int32_t>(readInt(env, o.Get(key), field + "." + key, -2147483648.0, 2147483647.0));
  };
  auto ints = [&](const char* key, std::vector<int32_t>* out) {
    if (has(o, key)) *out = readInt32Array(env, o.Get(key), field + "." + key);
  };
  boolean("transA", &a->transA);
  boolean("transB", &a->transB);
  number("alpha", &a->alpha);
  number("beta", &a->beta);
  if (has(o, "activation")) a->activation = parseActivation(env, o.Get("activation"), field + ".activation");
  number("activationAlpha", &a->activationAlpha);
  integer("axis", &a->axis);
  number("epsilon", &a->epsilon);
  ints("perm", &a->perm);
  ints("kernelShape", &a->kernelShape);
  ints("strides", &a->strides);
  ints("pads", &a->pads);
  ints("dilations", &a->dilations);
  integer("group", &a->group);
  boolean("countIncludePad", &a->countIncludePad);
}

Plan convertPlan(Napi::Env env, Napi::Value v) {
  if (!v.IsObject() || v.IsArray()) throwType(env, "plan must be an object, got " + describe(v));
  Napi::Object o = v.As<Napi::Object>();
  Plan plan;
  Napi::Array tensors = readArray(env, o.Get("tensors"), "plan.tensors");
  plan.tensors.resize(tensors.Length());
  for (uint32_t i = 0; i < tensors.Length(); i++) {
    std::string field = "plan.tensors[" + std::to_string(i) + "]";
    Napi::Value tv = tensors.Get(i);
    if (!tv.IsObject() || tv.IsArray()) throwType(env, field + " must be an object, got " + describe(tv));
    Napi::Object t = tv.As<Napi::Object>();
    flotilla::TensorDesc& d = plan.tensors[i];
    d.name = readString(env, t.Get("name"), field + ".name");
    field += " ('" + d.name + "')";
    d.dtype = parseDType(env, t.Get("dtype"), field + ".dtype");
    d.dims = readIntArray(env, t.Get("dims"), field + ".dims", -kMaxSafe, kMaxSafe);
    if (has(t, "data")) {
      size_t length = 0;
      const void* data = typedArrayData(env, t.Get("data"), typedArrayTypeOf(d.dtype), field + ".data",
                                        typedArrayName(d.dtype), &length);
      int64_t expected = 1;
      for (size_t k = 0; k < d.dims.size(); k++) {
        if (d.dims[k] < 0) {
          throwType(env, field + ".dims[" + std::to_string(k) + "] is a batch dim, but a constant's dims are fixed");
        }
        expected *= d.dims[k];
      }
      if (static_cast<int64_t>(length) != expected) {
        throwType(env, field + ".data has " + std::to_string(length) + " elements but its dims hold " +
                           std::to_string(expected));
      }
      const size_t bytes = length * flotilla::dtypeSize(d.dtype);
      d.data.resize(bytes);
      if (bytes > 0) std::memcpy(d.data.data(), data, bytes);
    }
  }
  const double tensorMax = static_cast<double>(plan.tensors.size()) - 1;
  Napi::Array ops = readArray(env, o.Get("ops"), "plan.ops");
  plan.ops.resize(ops.Length());
  for (uint32_t i = 0; i < ops.Length(); i++) {
    std::string field = "plan.ops[" + std::to_string(i) + "]";
    Napi::Value ov = ops.Get(i);
    if (!ov.IsObject() || ov.IsArray()) throwType(env, field + " must be an object, got " + describe(ov));
    Napi::Object op = ov.As<Napi::Object>();
    flotilla::OpDesc& d = plan.ops[i];
    d.name = readString(env, op.Get("name"), field + ".name");
    field += " ('" + d.name + "')";
    d.type = parseOpType(env, op.Get("op"), field + ".op");
    std::vector<int64_t> ins = readIntArray(env, op.Get("inputs"), field + ".inputs", -1, tensorMax);
    std::vector<int64_t> outs = readIntArray(env, op.Get("outputs"), field + ".outputs", 0, tensorMax);
    d.inputs.assign(ins.begin(), ins.end());
    d.outputs.assign(outs.begin(), outs.end());
    readAttrs(env, op.Get("attrs"), field + ".attrs", &d.attrs);
  }
  std::vector<int64_t> inputs = readIntArray(env, o.Get("inputs"), "plan.inputs", 0, tensorMax);
  std::vector<int64_t> outputs = readIntArray(env, o.Get("outputs"), "plan.outputs", 0, tensorMax);
  plan.inputs.assign(inputs.begin(), inputs.end());
  plan.outputs.assign(outputs.begin(), outputs.end());
  plan.maxBatch = static_cast<int32_t>(readInt(env, o.Get("maxBatch"), "plan.maxBatch", 0, 2147483647.0));
  return plan;
}

Precision parsePrecision(Napi::Env env, Napi::Value v, const std::string& field) {
  const std::string s = readString(env, v, field);
  if (s == "fp32") return Precision::F32;
  if (s == "fp16") return Precision::F16;
  if (s == "bf16") return Precision::BF16;
  throwType(env, field + " must be 'fp32', 'fp16' or 'bf16', got '" + s + "'");
}

// ---------------------------------------------------------------------------------------------------------------
// Session

/**
 * One run on its way: the promise, the session, the inputs (kept alive, not copied: Session::run copies them in)
 * and the output arrays it fills. Made on the JavaScript thread, run on the session's executor, finished (promise
 * settled, references dropped) back on the JavaScript thread.
 */
struct RunJob {
  RunJob(Napi::Env env, std::shared_ptr<Session> session, int batch)
      : env(env), deferred(Napi::Promise::Deferred::New(env)), session(std::move(session)), batch(batch) {}

  void addInput(Napi::Value array, const void* data) {
    keep.push_back(Napi::Persistent(array.As<Napi::Object>()));
    inputs.push_back(data);
  }
  void addOutput(Napi::Value array, void* data) {
    outputs.push_back(data);
    results.push_back(Napi::Persistent(array.As<Napi::Object>()));
  }

  /** On the executor's thread. */
  void execute() {
    try {
      session->run(inputs, batch, outputs);
    } catch (const std::invalid_argument& e) {
      code = "NATIVE_INVALID_INPUT";
      error = e.what();
    } catch (const std::exception& e) {
      code = "NATIVE_EXECUTION_FAILED";
      error = e.what();
    } catch (...) {
      code = "NATIVE_EXECUTION_FAILED";
      error = "unknown native exception";
    }
  }

  /** Back on the JavaScript thread. */
  void settle() {
    Napi::HandleScope scope(env);
    if (code != nullptr) {
      deferred.Reject(codedError(env, error, code).Value());
      return;
    }
    Napi::Array out = Napi::Array::New(env, results.size());
    for (uint32_t i = 0; i < results.size(); i++) out.Set(i, results[i].Value());
    deferred.Resolve(out);
  }

  Napi::Env env;
  Napi::Promise::Deferred deferred;
  std::shared_ptr<Session> session;
  int batch;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<Napi::ObjectReference> keep;
  std::vector<Napi::ObjectReference> results;
  const char* code = nullptr;  // set when the run failed
  std::string error;
};

struct AddonData;
void finishRun(Napi::Env env, Napi::Function, AddonData* data, RunJob* job);

/** Carries finished runs from executors back to the JavaScript thread (one per environment). */
using RunDone = Napi::TypedThreadSafeFunction<AddonData, RunJob, finishRun>;

struct AddonData {
  Napi::FunctionReference sessionConstructor;
  std::once_flag devicesOnce;
  std::vector<flotilla::CudaDeviceInfo> devices;
  std::string cudaReason;
  RunDone runDone;
  /** Runs submitted and not yet settled; runDone holds the event loop open only while there are some. */
  size_t runsInFlight = 0;
};

void finishRun(Napi::Env env, Napi::Function, AddonData* data, RunJob* job) {
  if (env == nullptr) {
    // The environment is being torn down: its references can no longer be released, and nobody waits.
    return;
  }
  std::unique_ptr<RunJob> owned(job);
  if (--data->runsInFlight == 0) data->runDone.Unref(env);
  owned->settle();
}

AddonData& dataOf(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

class SessionWrap : public Napi::ObjectWrap<SessionWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeSession",
                       {InstanceMethod<&SessionWrap::Run>("run"), InstanceMethod<&SessionWrap::Close>("close"),
                        InstanceAccessor<&SessionWrap::ArenaBytes>("arenaBytes"),
                        InstanceAccessor<&SessionWrap::Device>("device")});
  }

  explicit SessionWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SessionWrap>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throwType(info.Env(), "NativeSession is made by createSession(plan, options), not with new");
    }
    auto* holder = info[0].As<Napi::External<std::shared_ptr<Session>>>().Data();
    session_ = std::move(*holder);
    executor_ = std::make_unique<flotilla::Executor>();
    for (size_t i = 0; i < session_->inputCount(); i++) {
      inputLabels_.push_back("input " + std::to_string(i) + " ('" + session_->input(i).name + "')");
    }
    arenaBytes_ = static_cast<double>(session_->arenaBytes());
    device_ = session_->device();
  }

 private:
  Napi::Value Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto deferredFail = [&](Napi::Error e) {
      Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
      d.Reject(e.Value());
      return d.Promise();
    };
    if (!session_) return deferredFail(codedError(env, "the session is closed", "NATIVE_SESSION_CLOSED"));
    try {
      Session& s = *session_;
      if (info.Length() < 2) throwType(env, "run(inputs, batch) takes 2 arguments, got " + std::to_string(info.Length()));
      Napi::Value batchValue = info[1];
      int64_t batch = 0;
      if (!isInteger(batchValue, -2147483648.0, 2147483647.0, &batch)) {
        throwType(env, "batch must be an integer, got " + describe(batchValue));
      }
      try {
        s.checkBatch(static_cast<int>(batch));
      } catch (const std::invalid_argument& e) {
        throw Napi::RangeError::New(env, e.what());
      }
      if (!info[0].IsArray()) throwType(env, "inputs must be an array of typed arrays, got " + describe(info[0]));
      Napi::Array inputs = info[0].As<Napi::Array>();
      if (inputs.Length() != s.inputCount()) {
        throwType(env, "the model takes " + std::to_string(s.inputCount()) + " inputs, got " +
                           std::to_string(inputs.Length()));
      }
      auto job = std::make_unique<RunJob>(env, session_, static_cast<int>(batch));
      for (uint32_t i = 0; i < inputs.Length(); i++) {
        const flotilla::TensorDesc& t = s.input(i);
        const std::string& field = inputLabels_[i];
        size_t length = 0;
        Napi::Value v = inputs.Get(i);
        const void* data = typedArrayData(env, v, typedArrayTypeOf(t.dtype), field, typedArrayName(t.dtype), &length);
        const int64_t expected = s.inputElements(i, static_cast<int>(batch));
        if (static_cast<int64_t>(length) != expected) {
          throwType(env, field + " must hold " + std::to_string(expected) + " elements at batch " +
                             std::to_string(batch) + ", got " + std::to_string(length));
        }
        job->addInput(v, data);
      }
      for (size_t i = 0; i < s.outputCount(); i++) {
        const flotilla::TensorDesc& t = s.output(i);
        const size_t n = static_cast<size_t>(s.outputElements(i, static_cast<int>(batch)));
        Napi::Value array;
        void* data = nullptr;
        switch (t.dtype) {
          case DType::F32: {
            auto a = Napi::Float32Array::New(env, n);
            data = a.Data();
            array = a;
            break;
          }
          case DType::I32: {
            auto a = Napi::Int32Array::New(env, n);
            data = a.Data();
            array = a;
            break;
          }
          case DType::I64: {
            auto a = Napi::TypedArrayOf<int64_t>::New(env, n, napi_bigint64_array);
            data = a.Data();
            array = a;
            break;
          }
        }
        job->addOutput(array, data);
      }
      Napi::Promise promise = job->deferred.Promise();
      AddonData& data = dataOf(env);
      if (data.runsInFlight++ == 0) data.runDone.Ref(env);
      RunDone done = data.runDone;
      RunJob* raw = job.release();
      executor_->submit([raw, done]() mutable {
        raw->execute();
        // The queue is unbounded, so this fails only once the environment is closing: nobody is left to tell, and
        // the job's references die with the environment.
        done.BlockingCall(raw);
      });
      return promise;
    } catch (const Napi::Error& e) {
      return deferredFail(e);
    }
  }

  /** Runs already submitted still finish (they hold the session); the executor's thread ends after them. */
  void Close(const Napi::CallbackInfo&) {
    session_.reset();
    executor_.reset();
  }

  Napi::Value ArenaBytes(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), arenaBytes_); }
  Napi::Value Device(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), device_); }

  std::shared_ptr<Session> session_;
  std::unique_ptr<flotilla::Executor> executor_;
  /** "input 0 ('x')": what error messages call each input, made once rather than on every run. */
  std::vector<std::string> inputLabels_;
  double arenaBytes_ = 0;
  int device_ = -1;
};

// ---------------------------------------------------------------------------------------------------------------
// Module functions

void loadDevices(AddonData& data) {
  std::call_once(data.devicesOnce, [&] {
    try {
      data.devices = flotilla::listCudaDevices(&data.cudaReason);
    } catch (const std::exception& e) {
      data.cudaReason = e.what();
    }
    if (!data.devices.empty()) data.cudaReason.clear();
  });
}

Napi::Value Devices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  AddonData& data = dataOf(env);
  loadDevices(data);
  Napi::Array out = Napi::Array::New(env, data.devices.size());
  for (uint32_t i = 0; i < data.devices.size(); i++) {
    const flotilla::CudaDeviceInfo& d = data.devices[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", d.id);
    o.Set("name", d.name);
    o.Set("totalMemory", static_cast<double>(d.totalMemory));
    o.Set("computeCapability", std::to_string(d.major) + "." + std::to_string(d.minor));
    o.Set("multiProcessors", d.multiProcessors);
    out.Set(i, o);
  }
  return out;
}

Napi::Value CudaReason(const Napi::CallbackInfo& info) {
  AddonData& data = dataOf(info.Env());
  loadDevices(data);
  return Napi::String::New(info.Env(), data.cudaReason);
}

Napi::Value Cpu(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("isa", flotilla::isaName(flotilla::gemmIsa()));
  o.Set("threads", flotilla::defaultThreadPool().size());
  return o;
}

Napi::Value CreateSession(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Plan plan = convertPlan(env, info[0]);
  flotilla::SessionOptions options;
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    if (!info[1].IsObject() || info[1].IsArray()) throwType(env, "options must be an object, got " + describe(info[1]));
    Napi::Object o = info[1].As<Napi::Object>();
    if (has(o, "device")) options.device = static_cast<int>(readInt(env, o.Get("device"), "options.device", -1, 1024));
    if (has(o, "precision")) options.precision = parsePrecision(env, o.Get("precision"), "options.precision");
    if (has(o, "poison")) {
      Napi::Value p = o.Get("poison");
      if (!p.IsBoolean()) throwType(env, "options.poison must be a boolean, got " + describe(p));
      options.poison = p.As<Napi::Boolean>().Value();
    }
    if (has(o, "threads")) options.threads = static_cast<int>(readInt(env, o.Get("threads"), "options.threads", 0, 1024));
  }
  std::shared_ptr<Session> session;
  try {
    session = std::make_shared<Session>(std::move(plan), options);
  } catch (const std::invalid_argument& e) {
    throw codedError(env, std::string("invalid plan: ") + e.what(), "NATIVE_INVALID_PLAN");
  } catch (const std::exception& e) {
    throw codedError(env, std::string("cannot create the session: ") + e.what(), "NATIVE_SESSION_FAILED");
  }
  return dataOf(env).sessionConstructor.New({Napi::External<std::shared_ptr<Session>>::New(env, &session)});
}

Napi::Value Sgemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 10) {
    throwType(env, "sgemm(transA, transB, m, n, k, alpha, a, b, beta, c) takes 10 arguments, got " +
                       std::to_string(info.Length()));
  }
  auto boolean = [&](size_t i, const char* name) {
    if (!info[i].IsBoolean()) throwType(env, std::string(name) + " must be a boolean, got " + describe(info[i]));
    return info[i].As<Napi::Boolean>().Value();
  };
  auto number = [&](size_t i, const char* name) {
    if (!info[i].IsNumber()) throwType(env, std::string(name) + " must be a number, got " + describe(info[i]));
    return info[i].As<Napi::Number>().FloatValue();
  };
  const bool transA = boolean(0, "transA"), transB = boolean(1, "transB");
  const int64_t m = readInt(env, info[2], "m", 0, 1 << 24), n = readInt(env, info[3], "n", 0, 1 << 24),
                k = readInt(env, info[4], "k", 0, 1 << 24);
  const float alpha = number(5, "alpha"), beta = number(8, "beta");
  size_t la = 0, lb = 0, lc = 0;
  auto* a = static_cast<const float*>(typedArrayData(env, info[6], napi_float32_array, "a", "Float32Array", &la));
  auto* b = static_cast<const float*>(typedArrayData(env, info[7], napi_float32_array, "b", "Float32Array", &lb));
  auto* c = static_cast<float*>(typedArrayData(env, info[9], napi_float32_array, "c", "Float32Array", &lc));
  if (static_cast<int64_t>(la) < m * k) throwType(env, "a must hold m*k = " + std::to_string(m * k) + " elements");
  if (static_cast<int64_t>(lb) < k * n) throwType(env, "b must hold k*n = " + std::to_string(k * n) + " elements");
  if (static_cast<int64_t>(lc) < m * n) throwType(env, "c must hold m*n = " + std::to_string(m * n) + " elements");
  try {
    flotilla::sgemm(transA, transB, m, n, k, alpha, a, transA ? m : k, b, transB ? k : n, beta, c, n,
                    flotilla::GemmEpilogue{}, &flotilla::defaultThreadPool());
  } catch (const std::exception& e) {
    throw codedError(env, std::string("sgemm: ") + e.what(), "NATIVE_EXECUTION_FAILED");
  }
  return env.Undefined();
}

Napi::Value CudaGemmSeconds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 6) {
    throwType(env, "cudaGemmSeconds(device, m, n, k, precision, iterations) takes 6 arguments, got " +
                       std::to_string(info.Length()));
  }
  const int device = static_cast<int>(readInt(env, info[0], "device", 0, 1024));
  const int m = static_cast<int>(readInt(env, info[1], "m", 1, 1 << 16));
  const int n = static_cast<int>(readInt(env, info[2], "n", 1, 1 << 16));
  const int k = static_cast<int>(readInt(env, info[3], "k", 1, 1 << 16));
  const Precision precision = parsePrecision(env, info[4], "precision");
  const int iterations = static_cast<int>(readInt(env, info[5], "iterations", 1, 1 << 20));
  try {
    return Napi::Number::New(env, flotilla::cudaGemmSeconds(device, m, n, k, precision, iterations));
  } catch (const std::exception& e) {
    throw codedError(env, std::string("cudaGemmSeconds: ") + e.what(), "NATIVE_EXECUTION_FAILED");
  }
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);
  data->sessionConstructor = Napi::Persistent(SessionWrap::Define(env));
  data->runDone = RunDone::New(env, "flotilla.native.run", 0, 1, data);
  data->runDone.Unref(env);
  exports.Set("devices", Napi::Function::New<Devices>(env, "devices"));
  exports.Set("cudaCompiledIn", Napi::Boolean::New(env, flotilla::cudaCompiledIn()));
  exports.Set("cudaReason", Napi::Function::New<CudaReason>(env, "cudaReason"));
  exports.Set("cpu", Napi::Function::New<Cpu>(env, "cpu"));
  exports.Set("createSession", Napi::Function::New<CreateSession>(env, "createSession"));
  exports.Set("sgemm", Napi::Function::New<Sgemm>(env, "sgemm"));
  exports.Set("cudaGemmSeconds", Napi::Function::New<CudaGemmSeconds>(env, "cudaGemmSeconds"));
  return exports;
}

}  // namespace

NODE_API_MODULE(flotilla_native, Init)
