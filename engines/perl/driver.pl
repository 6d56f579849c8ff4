# sandbox-workbench Perl guest driver, evaluated once inside zeroperl at instance init.
#
# The host puts a serialized ExecuteRequest (bytes) into $SBW::request, evaluates
# `SBW::run()` and reads the serialized ExecuteResponse (bytes) from $SBW::response.
# Semantics: spec 3.2 (results), 3.3 (errors), 7.8 (sessions), 9.4 (stateless), 10.2 (env).

# User code is compiled by this string eval. It is defined first, outside any lexical
# scope and with no pragmas, so that user code sees none of the driver's lexicals and
# runs with Perl's defaults (no strict, no warnings). The code travels in @_ and is
# shifted off before compilation, so @_ is empty for the user code.
sub SBW::_user_eval { eval shift }

package SBW;

use strict;
use warnings;
use JSON::PP ();    # preloaded: stateless wrappers `use JSON::PP`, results need it

# Stateless runs get `use JSON::PP` inside their wrapper; sessions get the same imports
# (encode_json, decode_json) once, in package main.
package main { JSON::PP->import; }
package SBW;

our ($request, $response, $version);
$version = sprintf('%vd', $^V);

# `exit` must not end the instance (zeroperl turns it into WASI proc_exit). User code
# is compiled after this, so the override applies to it; `CORE::exit` still bypasses it.
BEGIN {
    *CORE::GLOBAL::exit = sub (;$) { die bless { status => $_[0] // 0 }, 'SBW::Exit' };
}

# Spec 9.3's fixed POSIX stubs: pid 1, parent 0, uid and gid 1000 (zeroperl's libc says
# 42, unimplemented, and 0). Each variable's glob gets a plain scalar, as %ENV does below,
# so user code compiled later reads the fixed value instead of the magic one.
BEGIN {
    *CORE::GLOBAL::getppid = sub () { 0 };
}
for my $stub (['$', 1], ['<', 1000], ['>', 1000], ['(', 1000], [')', 1000]) {
    no strict 'refs';
    *{"main::$stub->[0]"} = \(my $value = $stub->[1]);
}

my $FILE = '(sandbox)';
my $JSON = JSON::PP->new->canonical;
my $JSON_CHECK = JSON::PP->new;

# ---- protobuf (only the envelope messages) ------------------------------------------

sub _varint {
    my ($buf, $pos) = @_;
    my ($value, $shift) = (0, 0);
    while (1) {
        die "truncated varint\n" if $$pos >= length $$buf;
        my $byte = ord substr($$buf, $$pos++, 1);
        $value |= ($byte & 0x7f) << $shift if $shift < 32;
        return $value unless $byte & 0x80;
        $shift += 7;
    }
}

# Iterates the fields of a message: returns [field number, wire type, value] triples;
# length-delimited values are byte strings, unsupported wire types are skipped.
sub _fields {
    my ($buf) = @_;
    my ($pos, @fields) = (0);
    while ($pos < length $buf) {
        my $key = _varint(\$buf, \$pos);
        my ($field, $wire) = ($key >> 3, $key & 7);
        if ($wire == 0) {
            push @fields, [$field, $wire, _varint(\$buf, \$pos)];
        } elsif ($wire == 2) {
            my $length = _varint(\$buf, \$pos);
            die "truncated field\n" if $pos + $length > length $buf;
            push @fields, [$field, $wire, substr($buf, $pos, $length)];
            $pos += $length;
        } elsif ($wire == 1) {
            $pos += 8;
        } elsif ($wire == 5) {
            $pos += 4;
        } else {
            die "unsupported wire type $wire\n";
        }
    }
    return @fields;
}

sub _text {
    my ($bytes) = @_;
    utf8::decode($bytes);
    return $bytes;
}

sub decode_request {
    my ($buf) = @_;
    my %req = (code => '', env => {}, session => 0, cwd => '');
    for my $f (_fields($buf)) {
        my ($field, $wire, $value) = @$f;
        if ($field == 1 && $wire == 2) {
            $req{code} = _text($value);
        } elsif ($field == 2 && $wire == 2) {
            my ($key, $val) = ('', '');
            for my $entry (_fields($value)) {
                next unless $entry->[1] == 2;
                $key = _text($entry->[2]) if $entry->[0] == 1;
                $val = _text($entry->[2]) if $entry->[0] == 2;
            }
            $req{env}{$key} = $val;
        } elsif ($field == 3 && $wire == 0) {
            $req{session} = $value ? 1 : 0;
        } elsif ($field == 4 && $wire == 2) {
            $req{cwd} = _text($value);
        }
    }
    return \%req;
}

sub _vi {
    my ($value) = @_;
    my $out = '';
    while ($value >= 0x80) {
        $out .= chr(($value & 0x7f) | 0x80);
        $value >>= 7;
    }
    return $out . chr($value);
}

# A length-delimited field; `$value` is text (encoded to UTF-8) or already bytes. Text
# holds Unicode scalar values only: a protobuf string must be valid UTF-8, and Perl's
# strings may hold surrogates and code points past U+10FFFF ("\x{d800}"): U+FFFD each.
sub _len {
    my ($field, $value, $is_bytes) = @_;
    unless ($is_bytes) {
        $value =~ s/[^\x{0}-\x{D7FF}\x{E000}-\x{10FFFF}]/\x{FFFD}/g;
        utf8::encode($value);
    }
    return _vi(($field << 3) | 2) . _vi(length $value) . $value;
}

sub encode_response {
    my ($res) = @_;
    my $out = '';
    if (my $result = $res->{result}) {
        my ($kind, $value) = @$result;
        $out .= _len(1, _len($kind eq 'json' ? 2 : 1, $value), 1);
    }
    if (my $error = $res->{error}) {
        $out .= _len(2, _len(1, $error->{name}) . _len(2, $error->{message}), 1);
    }
    $out .= _len(4, $res->{cwd}) if defined $res->{cwd} && length $res->{cwd};
    return $out;
}

# ---- value and error mapping ----------------------------------------------------------

# Spec 3.2: undef -> no entry; unblessed HASH/ARRAY refs -> json when JSON::PP encodes
# them as valid JSON (Inf/NaN make it invalid); everything else "$value".
sub map_value {
    my ($value) = @_;
    return undef unless defined $value;
    my $type = ref $value;
    if ($type eq 'HASH' || $type eq 'ARRAY') {
        my $json = eval {
            my $text = $JSON->encode($value);
            $JSON_CHECK->decode($text);
            $text;
        };
        return ['json', $json] if defined $json;
    }
    return ['text', "$value"];
}

# Spec 3.3: name = ref($@) for an exception object, else PerlError; message = "$@"
# without trailing newlines; no traceback.
sub map_error {
    my ($err) = @_;
    my $name = ref($err) || 'PerlError';
    my $message = eval { "$err" } // $name;
    $message =~ s/\n+\z//;
    return { name => $name, message => $message };
}

sub _is_exit { ref $_[0] && eval { $_[0]->isa('SBW::Exit') } }

# ---- one execution --------------------------------------------------------------------

sub _session_source {
    my ($code) = @_;
    return "package main; use utf8;\n#line 1 \"$FILE\"\n$code\n";
}

# Spec 9.4: the code spliced into `eval { do { <code> } }`; runtime errors caught by the
# inner eval are handed back through $SBW::stateless_error.
our $stateless_error;
sub _stateless_source {
    my ($code) = @_;
    return "package main; use utf8; use JSON::PP;\n"
        . "(scalar eval { do {\n#line 1 \"$FILE\"\n$code\n} }, \$SBW::stateless_error = \$@)[0];\n";
}

sub execute {
    my ($req) = @_;
    # Spec 10.2: a plain hash of decoded strings aliased to %ENV (the magic %ENV would
    # encode wide characters through setenv); the WASI environment itself stays empty.
    *main::ENV = { %{ $req->{env} } };
    binmode STDOUT, ':utf8';
    binmode STDERR, ':utf8';
    chdir $req->{cwd} if $req->{session} && length $req->{cwd};

    my ($value, $error);
    $stateless_error = '';
    {
        local $@;
        if ($req->{session}) {
            $value = _user_eval(_session_source($req->{code}));
        } else {
            $value = _user_eval(_stateless_source($req->{code}));
        }
        $error = $@ || $stateless_error;
    }
    my %res;
    if (_is_exit($error)) {
        # a user `exit` ends the run like the end of the script: no value, no error
    } elsif ($error) {
        $res{error} = map_error($error);
    } else {
        my $result = eval { map_value($value) };
        if ($@) {
            $res{error} = map_error($@);    # e.g. an overloaded "" that dies
        } elsif ($result) {
            $res{result} = $result;
        }
    }
    if ($req->{session}) {
        require Cwd;    # loaded by the first session run only (stateless runs need no cwd)
        my $cwd = Cwd::getcwd() // '';
        $res{cwd} = ($cwd =~ m{\A/workspace(?:/|\z)} && -d $cwd) ? $cwd : '/workspace';
    }
    return \%res;
}

sub run {
    # zeroperl_new_string flags the scalar as UTF-8 without checking; turning the flag
    # off (utf8::encode of an already-UTF-8 scalar) recovers the raw protobuf bytes.
    my $bytes = $request;
    utf8::encode($bytes) if utf8::is_utf8($bytes);
    my $res = eval { execute(decode_request($bytes)) }
        // { error => { name => 'EngineError', message => "Perl driver failed: " . ($@ || 'unknown') } };
    # Flush without IO::Handle (costly to load): setting $| on a handle flushes it. The
    # host also calls zeroperl_flush after the run.
    my $selected = select STDOUT;
    my $autoflush = $|;
    $| = 1;
    $| = $autoflush;
    select $selected;
    $response = encode_response($res);
    return;
}

1;
