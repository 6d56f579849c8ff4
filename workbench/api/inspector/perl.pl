# The context inspector for Perl (workbench.api.inspector): lists the package variables
# and subs of `main` that the user made, or shows one of them in full. Its lexicals live
# in a do block, so it leaves no name behind.
do {
    my ($target_hex, $offset, $short_chars, $page_chars, $max_names, $budget) = (
        '{{target_hex}}', {{offset}}, {{short_chars}}, {{page_chars}}, {{max_names}},
        {{budget}},
    );
    my $marker = {{marker}};    # '': the host does not watch the listing's progress
    my %passed_over = map { $_ => 1 } @{ {{passed_over}} };    # names a run before stopped at
    require Data::Dumper;
    require Scalar::Util;
    # Globs every interpreter has, and the subs the driver imports into main.
    my %built_in = map { $_ => 1 } qw(
        ARGV ARGVOUT ENV INC SIG STDERR STDIN STDOUT stderr stdin stdout BEGIN END INIT
        CHECK UNITCHECK DESTROY AUTOLOAD _ encode_json decode_json from_json to_json
    );
    my %sort_scalars = (a => 1, b => 1);    # $a and $b: every `sort` sets them
    my @helpers = @{ {{helper_prefixes}} };   # the workbench's own names
    my $dump = sub {
        my ($value, $indent) = @_;
        local $Data::Dumper::Indent = $indent;
        local $Data::Dumper::Terse = 1;
        local $Data::Dumper::Sortkeys = 1;
        local $Data::Dumper::Useqq = 1;
        local $Data::Dumper::Deparse = 0;
        my $text = eval { Data::Dumper::Dumper($value) };
        return defined $text ? ($text =~ s/\n\z//r) : '<repr failed>';
    };
    my $scalar_type = sub {
        my ($value) = @_;
        return 'undef' unless defined $value;
        my $blessed = Scalar::Util::blessed($value);
        return $blessed if defined $blessed;
        my $ref = ref $value;
        return $ref if $ref;
        return Scalar::Util::looks_like_number($value) ? 'number' : 'string';
    };
    my $describe = sub {
        my ($sigil, $name, $indent) = @_;
        no strict 'refs';
        my $glob = \*{"main::$name"};
        if ($sigil eq '$') {
            my $value = ${ *{$glob}{SCALAR} };
            my $type = $scalar_type->($value);
            my $length = $type eq 'string' ? length $value : undef;
            return ($type, $dump->($value, $indent), $length);
        }
        if ($sigil eq '@') {
            my $array = *{$glob}{ARRAY};
            return ('array', $dump->($array, $indent), scalar @$array);
        }
        if ($sigil eq '%') {
            my $hash = *{$glob}{HASH};
            return ('hash', $dump->($hash, $indent), scalar keys %$hash);
        }
        my $full = eval { require Sub::Util; Sub::Util::subname(\&{"main::$name"}) };
        return ('sub', 'sub ' . ($full // "main::$name"), undef);
    };
    my @names;
    {
        no strict 'refs';
        for my $name (sort { lc $a cmp lc $b or $a cmp $b } keys %main::) {
            next if $name !~ /\A[A-Za-z_][A-Za-z0-9_]*\z/ || $built_in{$name};
            next if grep { index($name, $_) == 0 } @helpers;
            my $glob = \*{"main::$name"};
            next unless ref $glob eq 'GLOB';
            my $scalar = *{$glob}{SCALAR};
            # A tied scalar is not read here (its FETCH may loop): the listing reads it.
            push @names, "\$$name"
                if !$sort_scalars{$name}
                && $scalar
                && (tied($$scalar) || eval { defined $$scalar });
            push @names, "\@$name" if *{$glob}{ARRAY};
            push @names, "%$name" if *{$glob}{HASH};
            push @names, "&$name" if defined &{"main::$name"};
        }
    }
    if (length $target_hex) {
        my $wanted = pack 'H*', $target_hex;
        utf8::decode($wanted);
        my ($found) = grep { $_ eq $wanted } @names;
        if (!defined $found) {
            +{ found => JSON::PP::false(), name => $wanted };
        } else {
            my ($type, $text) = eval { $describe->(substr($found, 0, 1), substr($found, 1), 1) };
            ($type, $text) = ('?', '<repr failed>') unless defined $type;
            +{
                found => JSON::PP::true(),
                name  => $found,
                type  => $type,
                repr  => $offset < length $text ? substr($text, $offset, $page_chars) : '',
                total => length $text,
            };
        }
    } else {
        my @shown = @names > $max_names ? @names[0 .. $max_names - 1] : @names;
        my ($used, @entries) = (0);
        for my $index (0 .. $#shown) {
            my $name = $shown[$index];
            if (length $marker) {    # which name the listing is at, for the host to watch
                my $selected = select STDOUT;    # `$|` is the selected handle's
                my $flushing = $|;
                $| = 1;
                # User code that broke STDOUT: no more markers.
                $marker = '' unless eval { print STDOUT "\n$marker $index\n" };
                $| = $flushing;
                select $selected;
            }
            # A tied variable's FETCH (or anything else) that dies spoils only its entry.
            my ($type, $text, $length) = $passed_over{$index}
                ? ('?', {{passed_over_repr}}, undef)
                : eval { $describe->(substr($name, 0, 1), substr($name, 1), 0) };
            ($type, $text, $length) = ('?', '<repr failed>', undef) unless defined $type;
            $text =~ s/\s+/ /g;
            $text = substr($text, 0, $short_chars - 1) . "\x{2026}" if length $text > $short_chars;
            my $entry = {
                name   => substr($name, 0, 2 * $short_chars),
                type   => substr($type, 0, $short_chars),
                repr   => $text,
                length => $length,
                bytes  => undef,
            };
            $used += length JSON::PP->new->encode($entry);
            last if $used > $budget;
            push @entries, $entry;
        }
        +{ names => \@entries, more => @names - @entries };
    }
};
