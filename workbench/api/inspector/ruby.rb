# The context inspector for Ruby (workbench.api.inspector): lists the top-level locals,
# globals and constants the user made, or shows one of them in full. Its code is a method
# of an anonymous module (a method is a scope of its own), so it leaves no name behind.
Module.new.module_eval(<<'SBW_INSPECTOR', '(inspector)').run(binding, '{{target_hex}}', {{offset}}, {{short_chars}}, {{page_chars}}, {{max_names}})
  # Globals every interpreter has.
  BUILT_IN_GLOBALS = %i[
    $! $" $$ $& $' $* $+ $, $-0 $-F $-I $-W $-a $-d $-i $-l $-p $-v $-w $. $/ $0 $: $;
    $< $= $> $? $@ $DEBUG $FILENAME $LOADED_FEATURES $LOAD_PATH $PROGRAM_NAME $VERBOSE
    $\\ $_ $` $stderr $stdin $stdout $~
  ].freeze
  SIZED = [String, Symbol, Array, Hash, Struct].freeze

  def self.type_name(value)
    value.class.name || value.class.inspect
  rescue Exception
    'Object'
  end

  def self.safely
    yield.to_s
  rescue Exception => error
    "<repr failed: #{error.class}>"
  end

  def self.length_of(value)
    SIZED.any? { |kind| kind === value } ? value.size : nil
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
    (locals + globals + constants.map(&:to_s)).uniq.sort_by { |name| [name.downcase, name] }
  end

  def self.value_of(scope, name)
    return eval(name) if name.start_with?("$") # a name from global_variables
    return Object.const_get(name) if name.match?(/\A[A-Z]/)

    scope.local_variable_get(name)
  end

  def self.run(scope, target_hex, offset, short_chars, page_chars, max_names)
    names = self.names(scope)
    unless target_hex.empty?
      name = [target_hex].pack('H*').force_encoding(Encoding::UTF_8)
      return { 'found' => false, 'name' => name } unless names.include?(name)

      value = value_of(scope, name)
      text = safely do
        require 'pp'
        value.pretty_inspect.chomp
      end
      return { 'found' => true, 'name' => name, 'type' => type_name(value),
               'repr' => text[offset, page_chars] || '', 'total' => text.length }
    end
    entries = names.first(max_names).map do |name|
      value = value_of(scope, name)
      text = safely { value.inspect }.gsub(/\s+/, ' ')
      text = "#{text[0, short_chars - 1]}\u2026" if text.length > short_chars
      { 'name' => name, 'type' => type_name(value), 'repr' => text,
        'length' => length_of(value), 'bytes' => bytes_of(value) }
    end
    { 'names' => entries, 'more' => [names.length - max_names, 0].max }
  end
  self
SBW_INSPECTOR
