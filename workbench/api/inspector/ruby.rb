# The context inspector for Ruby (workbench.api.inspector): lists the top-level locals,
# globals and constants the user made, or shows one of them in full. Its code is a method
# of an anonymous module (a method is a scope of its own), so it leaves no name behind.
Module.new.module_eval(<<'SBW_INSPECTOR', '(inspector)').run(binding, '{{target_hex}}', {{offset}}, {{short_chars}}, {{page_chars}}, {{max_names}}, {{budget}}, {{marker}}, {{passed_over}})
  # Globals every interpreter has (`$sandbox_workbench_pid` is the driver's `$$`).
  BUILT_IN_GLOBALS = %i[
    $! $" $$ $& $' $* $+ $, $-0 $-F $-I $-W $-a $-d $-i $-l $-p $-v $-w $. $/ $0 $: $;
    $< $= $> $? $@ $DEBUG $FILENAME $LOADED_FEATURES $LOAD_PATH $PROGRAM_NAME $VERBOSE
    $\\ $_ $` $stderr $stdin $stdout $~ $sandbox_workbench_pid
  ].freeze
  SIZED = [String, Symbol, Array, Hash, Struct].freeze
  HELPERS = {{helper_prefixes}}.freeze # the workbench's own names

  def self.type_name(value)
    name = value.class.name || value.class.inspect
    name.is_a?(String) ? name : '?'
  rescue Exception
    '?'
  end

  def self.safely
    yield.to_s
  rescue Exception => error
    "<repr failed: #{error.class}>"
  end

  def self.length_of(value)
    size = SIZED.any? { |kind| kind === value } ? value.size : nil
    size.is_a?(Integer) && size >= 0 ? size : nil
  rescue Exception
    nil
  end

  def self.bytes_of(value)
    require 'objspace'
    ObjectSpace.memsize_of(value)
  rescue Exception
    nil
  end

  def self.names(scope)
    locals = scope.local_variables.map(&:to_s)
    globals = (global_variables - BUILT_IN_GLOBALS).map(&:to_s)
    constants = Object.constants.select do |name|
      Object.const_source_location(name)&.first == '(sandbox)'
    rescue Exception
      false
    end
    names = (locals + globals + constants.map(&:to_s)).uniq
    names.reject! { |name| name.delete_prefix('$').start_with?(*HELPERS) }
    names.sort_by { |name| [name.downcase, name] }
  end

  def self.value_of(scope, name)
    return eval(name) if name.start_with?("$") # a name from global_variables
    return Object.const_get(name) if name.match?(/\A\p{Upper}/)

    scope.local_variable_get(name)
  end

  def self.run(scope, target_hex, offset, short_chars, page_chars, max_names, budget, marker, passed_over)
    names = self.names(scope)
    unless target_hex.empty?
      name = [target_hex].pack('H*').force_encoding(Encoding::UTF_8)
      return { 'found' => false, 'name' => name } unless names.include?(name)

      value = begin
        value_of(scope, name)
      rescue Exception => error
        "<value failed: #{error.class}>"
      end
      text = safely do
        require 'pp'
        value.pretty_inspect.chomp
      end
      return { 'found' => true, 'name' => name, 'type' => type_name(value),
               'repr' => text[offset, page_chars] || '', 'total' => text.length }
    end
    entries = []
    used = 0
    names.first(max_names).each_with_index do |name, index|
      unless marker.empty? # which name the listing is at, for the host to watch
        begin
          STDOUT.write("\n#{marker} #{index}\n")
          STDOUT.flush
        rescue Exception
          marker = '' # user code replaced or broke it: no more markers
        end
      end
      entry = if passed_over.include?(index)
                { 'name' => name[0, 2 * short_chars], 'type' => '?', 'repr' => {{passed_over_repr}},
                  'length' => nil, 'bytes' => nil }
              else
                entry(scope, name, short_chars)
              end
      used += JSON.generate(entry).bytesize
      break if used > budget

      entries << entry
    end
    { 'names' => entries, 'more' => names.length - entries.length }
  end

  def self.entry(scope, name, short_chars)
    value = value_of(scope, name)
    text = safely { value.inspect }.gsub(/\s+/, ' ')
    text = "#{text[0, short_chars - 1]}\u2026" if text.length > short_chars
    { 'name' => name[0, 2 * short_chars], 'type' => type_name(value)[0, short_chars],
      'repr' => text, 'length' => length_of(value), 'bytes' => bytes_of(value) }
  rescue Exception => error
    { 'name' => name[0, 2 * short_chars], 'type' => '?', 'repr' => "<repr failed: #{error.class}>",
      'length' => nil, 'bytes' => nil }
  end
  self
SBW_INSPECTOR
