# Guest driver for the Ruby engine (CRuby 4.0 on ruby.wasm), evaluated once after ruby-init.
#
# The host calls `run(base64_request)` through rb-funcallv-protect on the module this file
# evaluates to, and reads the returned binary String (a serialized ExecuteResponse) with
# rstring-ptr. The module is removed from Object so user code cannot reach or replace it by
# name. Protocol buffers are hand-coded here for exactly the envelope messages.
require 'json'

module SandboxWorkbenchDriver
  FILE = __FILE__
  REAL_ENV = ENV
  WORKSPACE = '/workspace'
  DISABLED_MESSAGE = 'JavaScript host access is disabled'
  LOCAL_JUMP = ['LocalJumpError', 'unexpected return', [].freeze].freeze

  # Raised instead of calling the JavaScript bridge (spec 9.3). Not a StandardError, so a
  # bare `rescue` does not swallow it; the driver reports it as EngineError.
  HostAccessDisabled = Class.new(Exception)

  # ---- JavaScript bridge: load it once, then replace every method it added ----------------
  def self.method_table
    table = {}.compare_by_identity
    ObjectSpace.each_object(Module) do |mod|
      table[mod] = mod.instance_methods(false) + mod.private_instance_methods(false) +
                   mod.protected_instance_methods(false)
    end
    table
  end

  def self.disable_js
    before = method_table
    require 'js'
    method_table.each do |mod, names|
      (names - before.fetch(mod, [])).each do |name|
        mod.send(:define_method, name) { |*_args, **_opts, &_block| raise HostAccessDisabled, DISABLED_MESSAGE }
      end
    end
  end
  disable_js

  # ---- A user `exit!` must not end the process (it would trap the instance) -------------
  exit_bang = lambda do |status = false|
    code = status == true ? 0 : (status == false ? 1 : Integer(status))
    raise SystemExit.new(code, 'exit')
  end
  [Kernel, Kernel.singleton_class, Process.singleton_class].each do |mod|
    mod.send(:define_method, :exit!, &exit_bang)
  end
  Kernel.send(:private, :exit!)

  # ---- Spec 9.3's fixed POSIX stubs: pid 1, parent 0, uid and gid 1000 --------------------
  # (ruby.wasm's libc says 42 and 0). `$$` reads the getpid stub, so it becomes an alias.
  { pid: 1, ppid: 0, uid: 1000, gid: 1000, euid: 1000, egid: 1000 }.each do |name, value|
    Process.singleton_class.send(:define_method, name) { value }
  end
  $sandbox_workbench_pid = 1
  alias $$ $sandbox_workbench_pid

  # ---- Output streams while a run lasts ----------------------------------------------------
  # STDOUT and STDERR stay buffered (few writes: spec 9.2 counts them), but a completed line
  # reaches the host once STREAM_SECONDS passed since the last did, and before a sleep, so a
  # cell that prints as it goes is seen as it goes.
  STREAM_SECONDS = 0.25
  streaming = Module.new do
    def write(*args)
      written = super
      if args.any? { |arg| arg.is_a?(String) && arg.include?("\n") }
        now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        if now - (@sbw_flushed_at ||= 0.0) >= STREAM_SECONDS
          @sbw_flushed_at = now
          flush
        end
      end
      written
    end
  end
  [STDOUT, STDERR].each { |io| io.singleton_class.prepend(streaming) }
  flushing_sleep = Module.new do
    def sleep(*args)
      [$stdout, $stderr].each { |io| io.flush if io.respond_to?(:flush) }
      super
    end
  end
  Kernel.prepend(flushing_sleep)

  # ---- Protocol buffers ------------------------------------------------------------------
  def self.read_varint(buf, pos)
    result = 0
    shift = 0
    loop do
      byte = buf.getbyte(pos) or raise ArgumentError, 'truncated varint'
      pos += 1
      result |= (byte & 0x7f) << shift
      return [result, pos] if byte < 0x80

      shift += 7
    end
  end

  # Yields [field number, value] for every field of one message (value: Integer or String).
  def self.each_field(buf)
    pos = 0
    while pos < buf.bytesize
      key, pos = read_varint(buf, pos)
      case key & 7
      when 0 then value, pos = read_varint(buf, pos)
      when 1 then value = buf.byteslice(pos, 8); pos += 8
      when 2
        length, pos = read_varint(buf, pos)
        value = buf.byteslice(pos, length)
        pos += length
      when 5 then value = buf.byteslice(pos, 4); pos += 4
      else raise ArgumentError, "unsupported wire type #{key & 7}"
      end
      yield key >> 3, value
    end
  end

  def self.text(bytes) = bytes.dup.force_encoding(Encoding::UTF_8)

  def self.decode_request(buf)
    request = { code: +'', env: {}, session: false, cwd: +'' }
    each_field(buf) do |number, value|
      case number
      when 1 then request[:code] = text(value)
      when 2
        key = +''
        val = +''
        each_field(value) do |n, v|
          key = text(v) if n == 1
          val = text(v) if n == 2
        end
        request[:env][key] = val
      when 3 then request[:session] = value != 0
      when 4 then request[:cwd] = text(value)
      end
    end
    request
  end

  def self.varint(number)
    out = String.new(encoding: Encoding::BINARY)
    loop do
      byte = number & 0x7f
      number >>= 7
      return out << byte.chr if number.zero?

      out << (byte | 0x80).chr
    end
  end

  def self.field(number, bytes)
    bytes = bytes.b
    varint((number << 3) | 2) << varint(bytes.bytesize) << bytes
  end

  # Any Ruby string as valid UTF-8 (protobuf strings must be).
  def self.utf8(value)
    s = value.to_s
    s = if [Encoding::UTF_8, Encoding::BINARY, Encoding::US_ASCII].include?(s.encoding)
          s.dup.force_encoding(Encoding::UTF_8)
        else
          s.encode(Encoding::UTF_8, invalid: :replace, undef: :replace)
        end
    s.valid_encoding? ? s : s.scrub("\uFFFD")
  rescue StandardError
    '(unprintable)'
  end

  def self.encode_response(result, error, cwd)
    out = String.new(encoding: Encoding::BINARY)
    if result
      kind, body = result
      out << field(1, field(kind == :json ? 2 : 1, utf8(body)))
    end
    if error
      name, message, traceback = error
      inner = field(1, utf8(name)) << field(2, utf8(message))
      traceback.each { |line| inner << field(3, utf8(line)) }
      out << field(2, inner)
    end
    out << field(4, cwd) if cwd
    out
  end

  # ---- Execution -------------------------------------------------------------------------
  def self.install_env(env)
    begin
      REAL_ENV.replace(env) # C-level getenv (e.g. TZ) sees the same variables
    rescue StandardError
      nil
    end
    Object.send(:remove_const, :ENV) if Object.const_defined?(:ENV, false)
    Object.const_set(:ENV, env)
  end

  # spec 3.2: nil -> no entry; Hash/Array -> JSON when JSON.generate succeeds; else inspect.
  def self.to_result(value)
    return nil if NilClass === value

    if Hash === value || Array === value
      begin
        return [:json, JSON.generate(value)]
      rescue StandardError, SystemStackError
        nil
      end
    end
    shown = Kernel === value ? value.inspect : Kernel.instance_method(:inspect).bind_call(value)
    [:text, String === shown ? shown : shown.to_s]
  end

  # spec 3.3: class name, message, backtrace without the driver's own frames.
  def self.to_error(exc)
    return ['EngineError', DISABLED_MESSAGE, []] if HostAccessDisabled === exc

    name = exc.class.name || exc.class.inspect
    message = begin
      exc.message
    rescue Exception # rubocop:disable Lint/RescueException
      '(message unavailable)'
    end
    trace = exc.backtrace
    trace = Array === trace ? trace.take_while { |line| !line.to_s.start_with?("#{FILE}:") } : []
    [name, message, trace]
  end

  def self.current_cwd
    dir = Dir.pwd
    inside = dir == WORKSPACE || dir.start_with?("#{WORKSPACE}/")
    inside && File.directory?(dir) ? dir : WORKSPACE
  rescue StandardError, SystemCallError
    WORKSPACE
  end

  def self.flush_output
    [$stdout, $stderr, STDOUT, STDERR].each do |io|
      io.flush if io.respond_to?(:flush)
    rescue StandardError
      nil
    end
  end

  def self.run(encoded)
    request = nil
    result = nil
    error = nil
    finished = false
    begin
      request = decode_request(encoded.unpack1('m0'))
      install_env(request[:env])
      if request[:session]
        begin
          Dir.chdir(request[:cwd]) unless request[:cwd].empty?
        rescue StandardError, SystemCallError
          nil
        end
        scope = (@session_binding ||= TOPLEVEL_BINDING.dup)
      else
        scope = TOPLEVEL_BINDING.dup
      end
      result = to_result(scope.eval(request[:code], '(sandbox)', 1))
      finished = true
    rescue Exception => e # rubocop:disable Lint/RescueException
      error = to_error(e)
      finished = true
    ensure
      # A top-level `return` (or a proc's) unwinds through here without an exception; the
      # `return` below ends that jump, so the caller always gets a response.
      error = LOCAL_JUMP unless finished
      flush_output
      cwd = request && request[:session] ? current_cwd : nil
      return encode_response(result, error, cwd) # rubocop:disable Lint/EnsureReturn
    end
  end
end

Object.send(:remove_const, :SandboxWorkbenchDriver)
